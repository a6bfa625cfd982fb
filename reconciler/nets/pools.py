"""Watchdogs of requests and pools: they release, fail or reset requests, never touch a machine.

None of them may undo `min_workers`, and none reads "unknown" as "nothing": when Ray's demand
could not be read (`demand is None`) a pool is not idle and a request is not without a consumer.

- pool idle release (15 min): a node type nobody asked for and nobody worked on for the pool idle
  window gives up the open requests above `min_workers` (newest first); its machines are left to
  the money chain;
- queue-wait timeout (60 s): a request that waited in the queue (no candidate rented: breaker open,
  no acceptable offer) past the queue-wait timeout fails; its slots count toward the breaker and a
  person is alerted;
- no-consumer (60 s): an open request for a node type with no demand left (known, not unknown) and
  min_workers already met has nobody waiting for it, and fails;
- stuck-dispatch reset (60 s): a dispatched request left with open slots and no live candidate is
  put back in the queue, saying why nothing rents (every offer refused, creates failing): its
  queue wait starts again, so the queue-wait timeout fails it if nothing rents.

The slots of a request these end count toward the rent-loop breaker (planning does the counting,
when the ended requests are folded into a plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.model.records import InstanceRecord, PoolState, Records, Role
from reconciler.model.requestrecord import Request, RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.nets.base import scannable, serving_workers
from reconciler.nets.detection import Detection

NodeKey = tuple[str, str]


@dataclass
class PoolResult:
    detections: list[Detection] = field(default_factory=list)
    requests: dict[str, Request] = field(default_factory=dict)
    pools: dict[str, PoolState] = field(default_factory=dict)


def _open(records: Records, cluster: str, node_type: str) -> list[Request]:
    return [
        r for r in records.index.requests_of(cluster, node_type) if r.status is RequestStatus.OPEN
    ]


def _end(request: Request, status: RequestStatus, cls: str, why: str, out: PoolResult) -> None:
    out.requests[request.id] = replace(request, status=status, ended_reason=cls)
    out.detections.append(Detection(request.id, cls, why, cluster=request.cluster))


def _workers(records: Records, cluster: str, node_type: str) -> int:
    """Workers in rotation (a lost one is not capacity)."""
    return sum(
        1 for w in serving_workers(records.index.of_node_type(cluster, node_type)) if not w.lost
    )


def pool_idle_release(
    records: Records,
    specs: Mapping[str, ClusterSpec],
    *,
    demand: Mapping[NodeKey, int] | None,
    busy: Mapping[str, bool | None],
    now: float,
) -> PoolResult:
    out = PoolResult()
    for spec in specs.values():
        for name, node_type in spec.node_types.items():
            key = f"{spec.name}/{name}"
            members = scannable(records.index.of_node_type(spec.name, name))
            active = (
                demand is None
                or demand.get((spec.name, name), 0) > 0
                or any(busy.get(r.id) for r in members)
            )
            state = records.pools.get(key, PoolState())
            if active:
                if state.idle_since is not None:
                    out.pools[key] = PoolState(None)
                continue
            if state.idle_since is None:
                out.pools[key] = PoolState(now)
                continue
            idle = now - state.idle_since
            if idle < spec.watchdogs.pool_idle_release_seconds:
                continue
            requests = sorted(_open(records, spec.name, name), key=lambda r: r.placed_at)
            capacity = _workers(records, spec.name, name) + sum(len(r.open_slots) for r in requests)
            for request in reversed(requests):  # newest first
                slots = len(request.open_slots)
                if capacity - slots < node_type.min_workers:
                    continue  # min_workers needs it: never released
                capacity -= slots
                why = f"pool idle for {idle:.0f}s; capacity above min_workers released"
                _end(request, RequestStatus.RELEASED, "pool_idle_release", why, out)
    return out


def queue_wait(records: Records, specs: Mapping[str, ClusterSpec], *, now: float) -> PoolResult:
    out = PoolResult()
    for request in records.requests.values():
        spec = specs.get(request.cluster)
        if spec is None or request.status is not RequestStatus.OPEN or request.dispatched_at:
            continue
        waited = now - request.waiting_since
        limit = spec.watchdogs.queue_wait_timeout_seconds
        if waited >= limit:
            why = f"queued {waited:.0f}s (limit {limit}s) with no candidate rented" + (
                f": {request.dispatch_error}" if request.dispatch_error else ""
            )
            _end(request, RequestStatus.FAILED, "queue_wait_timeout", why, out)
    return out


def no_consumer(
    records: Records,
    specs: Mapping[str, ClusterSpec],
    *,
    demand: Mapping[NodeKey, int] | None,
) -> PoolResult:
    out = PoolResult()
    if demand is None:
        return out  # Ray could not be read: unknown, never "no demand"
    for request in records.requests.values():
        spec = specs.get(request.cluster)
        if spec is None or request.status is not RequestStatus.OPEN:
            continue
        node_type = spec.node_types.get(request.node_type)
        if node_type is None:
            _end(request, RequestStatus.FAILED, "no_consumer", "node type removed", out)
            continue
        have = _workers(records, spec.name, node_type.name)
        if demand.get((spec.name, node_type.name), 0) == 0 and have >= node_type.min_workers:
            _end(request, RequestStatus.FAILED, "no_consumer", "no demand left for it", out)
    return out


def stuck_dispatch(
    records: Records, specs: Mapping[str, ClusterSpec], *, now: float, cadence: float
) -> PoolResult:
    out = PoolResult()
    candidates: dict[str, list[InstanceRecord]] = {}
    for r in scannable(records.instances.values()):
        if r.request_id and r.role is Role.CANDIDATE:
            candidates.setdefault(r.request_id, []).append(r)
    for request in records.requests.values():
        if request.status is not RequestStatus.OPEN or request.dispatched_at is None:
            continue
        if request.cluster not in specs:
            continue
        stuck = now - request.dispatched_at
        if request.open_slots and not candidates.get(request.id) and stuck >= cadence:
            out.requests[request.id] = replace(request, dispatched_at=None, queued_at=now)
            why = request.dispatch_error or "every candidate ended and none rents"
            out.detections.append(
                Detection(
                    request.id,
                    "stuck_dispatch",
                    f"no candidate renting for {stuck:.0f}s ({why}); back in the queue, "
                    "searching afresh",
                    cluster=request.cluster,
                )
            )
    return out
