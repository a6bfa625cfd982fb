"""Watchdogs of requests and pools: they release, fail or reset requests, never touch a machine.

- pool idle release (15 min): a node type nobody asked for and nobody worked on for the pool idle
  window gives up its open requests; its machines are left to the money chain;
- queue-wait timeout (60 s): a request never dispatched (no candidate ever rented: breaker open, no
  offer) fails after the queue-wait timeout instead of waiting forever;
- no-consumer (60 s): an open request for a node type with no demand left and min_workers already
  met has nobody waiting for it, and fails;
- stuck-dispatch reset (60 s): a dispatched request left with open slots and no live candidate is
  put back in the queue, so it is dispatched again and its queue wait counts again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from reconciler.model.records import (
    InstanceRecord,
    PoolState,
    Records,
    Request,
    RequestStatus,
    Role,
)
from reconciler.model.spec import ClusterSpec
from reconciler.nets.base import scannable
from reconciler.nets.detection import Detection

NodeKey = tuple[str, str]


@dataclass
class PoolResult:
    detections: list[Detection] = field(default_factory=list)
    requests: dict[str, Request] = field(default_factory=dict)
    pools: dict[str, PoolState] = field(default_factory=dict)


def _open(records: Records, cluster: str, node_type: str) -> list[Request]:
    return [
        r
        for r in records.requests.values()
        if r.cluster == cluster and r.node_type == node_type and r.status is RequestStatus.OPEN
    ]


def _end(request: Request, status: RequestStatus, cls: str, why: str, out: PoolResult) -> None:
    out.requests[request.id] = replace(request, status=status, ended_reason=cls)
    out.detections.append(Detection(request.id, cls, why))


def pool_idle_release(
    records: Records,
    specs: Mapping[str, ClusterSpec],
    *,
    demand: Mapping[NodeKey, int],
    busy: Mapping[str, bool | None],
    now: float,
) -> PoolResult:
    out = PoolResult()
    live = scannable(records.instances.values())
    for spec in specs.values():
        for name in spec.node_types:
            key = f"{spec.name}/{name}"
            members = [r for r in live if r.cluster == spec.name and r.node_type == name]
            active = demand.get((spec.name, name), 0) > 0 or any(busy.get(r.id) for r in members)
            state = records.pools.get(key, PoolState())
            if active:
                if state.idle_since is not None:
                    out.pools[key] = PoolState(None)
                continue
            if state.idle_since is None:
                out.pools[key] = PoolState(now)
                continue
            if now - state.idle_since < spec.watchdogs.pool_idle_release_seconds:
                continue
            for request in _open(records, spec.name, name):
                _end(request, RequestStatus.RELEASED, "pool_idle_release", "pool idle", out)
    return out


def queue_wait(records: Records, specs: Mapping[str, ClusterSpec], *, now: float) -> PoolResult:
    out = PoolResult()
    for request in records.requests.values():
        spec = specs.get(request.cluster)
        if spec is None or request.status is not RequestStatus.OPEN or request.dispatched_at:
            continue
        waited = now - request.placed_at
        if waited > spec.watchdogs.queue_wait_timeout_seconds:
            _end(request, RequestStatus.FAILED, "queue_wait_timeout", f"queued {waited:.0f}s", out)
    return out


def no_consumer(
    records: Records,
    specs: Mapping[str, ClusterSpec],
    *,
    demand: Mapping[NodeKey, int],
) -> PoolResult:
    out = PoolResult()
    workers = [r for r in scannable(records.instances.values()) if r.role is Role.WORKER]
    for request in records.requests.values():
        spec = specs.get(request.cluster)
        if spec is None or request.status is not RequestStatus.OPEN:
            continue
        node_type = spec.node_types.get(request.node_type)
        if node_type is None:
            _end(request, RequestStatus.FAILED, "no_consumer", "node type removed", out)
            continue
        have = sum(1 for w in workers if w.cluster == spec.name and w.node_type == node_type.name)
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
        if (
            request.open_slots
            and not candidates.get(request.id)
            and now - request.dispatched_at > cadence
        ):
            out.requests[request.id] = replace(request, dispatched_at=None)
            out.detections.append(Detection(request.id, "stuck_dispatch", "no live candidate left"))
    return out
