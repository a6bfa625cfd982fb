"""Turn what the nets found into a plan the executor can carry out.

Nets between reconciles find machines to end or stop and requests to close; this makes those
findings the same kind of plan `plan()` makes, so one executor, one ledger path and one set of
refusals serve both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from reconciler.model.changes import Changes
from reconciler.model.plan import Plan
from reconciler.model.records import InstanceRecord, PoolState, Records
from reconciler.model.requestrecord import Request
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection
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
    # Requests the watchdogs released or failed are ended in `updated` and nothing more: those
    # watchdogs never touch a machine and count nothing toward the breaker (DESIGN.md 11); the
    # live candidates keep their own limits and may still join as workers.
    draft = Draft.start(updated, lineage=lineage, now=now)
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
        diagnostics=tuple(draft.notes),
        alerts=tuple(draft.alerts),
        detections=tuple(draft.detections),
        changes=Changes.between(records, draft.finish()),
    )


def _cluster_of(found: Detection, records: Records) -> str | None:
    if found.record in records.instances:
        return records.instances[found.record].cluster
    if found.record in records.requests:
        return records.requests[found.record].cluster
    return None
