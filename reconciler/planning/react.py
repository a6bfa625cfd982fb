"""Turn what the nets found into a plan the executor can carry out.

Nets between reconciles find machines to end or stop and requests to close; this makes those
findings the same kind of plan `plan()` makes, so one executor, one ledger path and one set of
refusals serve both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from reconciler.model.plan import Plan
from reconciler.model.records import InstanceRecord, PoolState, Records, Request, RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection
from reconciler.planning import scaling
from reconciler.planning.draft import Draft
from reconciler.planning.lifecycle import apply_detections
from reconciler.planning.plan import ACTION_ORDER


def react(
    records: Records,
    detections: Iterable[Detection],
    specs: Mapping[str, ClusterSpec],
    *,
    lineage: str,
    serial: int,
    now: float,
    instances: Mapping[str, InstanceRecord] | None = None,
    requests: Mapping[str, Request] | None = None,
    pools: Mapping[str, PoolState] | None = None,
) -> Plan:
    """A plan from detections, after the nets' bookkeeping updates are folded in."""
    updated = replace(
        records,
        instances={**records.instances, **(instances or {})},
        requests={**records.requests, **(requests or {})},
        pools={**records.pools, **(pools or {})},
    )
    draft = Draft.start(updated, lineage=lineage, now=now)
    _end_requests(draft, records, requests or {}, specs)
    by_cluster: dict[str, list[Detection]] = {}
    for found in detections:
        cluster = _cluster_of(found, updated)
        if cluster is not None:
            by_cluster.setdefault(cluster, []).append(found)
    for cluster, findings in sorted(by_cluster.items()):
        if cluster in specs:
            apply_detections(draft, findings, specs[cluster])
    return Plan(
        created_at=now,
        lineage=lineage,
        serial=serial,
        listing_fingerprint="",
        actions=tuple(sorted(draft.actions, key=lambda a: ACTION_ORDER[a.kind])),
        costs=(),
        notes=tuple(draft.notes),
        detections=tuple(draft.detections),
        records=draft.finish(),
    )


def _end_requests(
    draft: Draft,
    before: Records,
    requests: Mapping[str, Request],
    specs: Mapping[str, ClusterSpec],
) -> None:
    """Requests the watchdogs released or failed: their open slots ended with no worker and
    count toward the breaker (DESIGN.md 10), and their candidates are ended at once."""
    touched: set[str] = set()
    for request in requests.values():
        old = before.requests.get(request.id)
        spec = specs.get(request.cluster)
        ended = request.status in (RequestStatus.RELEASED, RequestStatus.FAILED)
        if spec is None or old is None or old.status is not RequestStatus.OPEN or not ended:
            continue
        touched.add(spec.name)
        why = f"request {request.id} {request.status.value} ({request.ended_reason})"
        scaling.end_open_slots(
            draft,
            spec,
            request,
            status=request.status,
            cls=request.ended_reason or request.status.value,
            why=f"{len(request.open_slots)} slot(s) ended with no worker: {why}",
        )
    for name in sorted(touched):
        scaling.settle_requests(draft, specs[name])


def _cluster_of(found: Detection, records: Records) -> str | None:
    if found.record in records.instances:
        return records.instances[found.record].cluster
    if found.record in records.requests:
        return records.requests[found.record].cluster
    return None
