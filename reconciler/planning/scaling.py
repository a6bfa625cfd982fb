"""From demand to candidates (first seed, steps 1-3 and 6) and back down to max_workers.

For each node type: the workers wanted are `min_workers` raised by Ray's pending demand and
capped by `max_workers`. A shortfall not covered by open requests becomes a new request of n
slots with its provisioning deadline fixed now; each open request keeps `candidate_factor`
candidates per open slot, rented from the cheapest acceptable offers. A filled request's other
candidates are destroyed; an expired one ends its slots without a worker, which is what the
rent-loop breaker counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reconciler.model.observed import Offer
from reconciler.model.plan import Action, ActionKind, Unmet
from reconciler.model.records import (
    BlockEntry,
    BreakerState,
    InstanceRecord,
    Intent,
    Request,
    RequestStatus,
    Role,
    Slot,
    label_for,
)
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.planning import offers as offer_picking
from reconciler.planning.draft import Draft
from reconciler.planning.lifecycle import apply_detections


def live_of(draft: Draft, cluster: str, node_type: str) -> list[InstanceRecord]:
    return [
        r
        for r in draft.instances.values()
        if r.cluster == cluster
        and r.node_type == node_type
        and r.live
        and r.intent is not Intent.DESTROYED
        and r.id not in draft.doomed
    ]


def settle_requests(draft: Draft, spec: ClusterSpec) -> None:
    """Close filled requests (destroying their extra candidates) and expire overdue ones."""
    for request in list(draft.requests.values()):
        if request.cluster != spec.name or request.status is not RequestStatus.OPEN:
            continue
        if not request.open_slots:
            _close_filled(draft, request)
        elif draft.now > request.provision_deadline:
            _expire(draft, request, spec)


def _candidates(draft: Draft, request: Request) -> list[InstanceRecord]:
    return [
        r
        for r in live_of(draft, request.cluster, request.node_type)
        if r.request_id == request.id and r.role is Role.CANDIDATE
    ]


def _close_filled(draft: Draft, request: Request) -> None:
    draft.requests[request.id] = replace(request, status=RequestStatus.FILLED)
    for extra in _candidates(draft, request):
        draft.destroy(extra, "extra_candidate", f"request {request.id} has a worker in every slot")


def _expire(draft: Draft, request: Request, spec: ClusterSpec) -> None:
    empty = len(request.open_slots)
    slots = tuple(s if s.worker else replace(s, ended_without_worker=True) for s in request.slots)
    draft.requests[request.id] = replace(request, slots=slots, status=RequestStatus.EXPIRED)
    why = f"request {request.id} passed its provisioning deadline with {empty} empty slot(s)"
    found = [
        Detection(c.id, "provision_deadline", why, c.vast_id) for c in _candidates(draft, request)
    ]
    apply_detections(draft, found, spec)
    count_empty_slots(draft, spec, request.node_type, empty)


def count_empty_slots(draft: Draft, spec: ClusterSpec, node_type: str, empty: int) -> None:
    """The rent-loop breaker: `slots` empty slots in a row pause launches of a node type."""
    state = draft.breaker(spec.name, node_type)
    count = state.consecutive_empty + empty
    if count >= spec.breaker.slots:
        until = draft.now + spec.breaker.pause_seconds
        draft.set_breaker(spec.name, node_type, BreakerState(0, until))
        draft.add(
            Action(
                ActionKind.PAUSE,
                spec.name,
                "breaker_open",
                f"{count} slots in a row ended with no worker; launches paused",
                node_type=node_type,
                until=until,
            )
        )
    else:
        draft.set_breaker(spec.name, node_type, BreakerState(count, state.paused_until))


def scale(
    draft: Draft,
    spec: ClusterSpec,
    node_type: NodeType,
    *,
    offers: Sequence[Offer],
    demand: int,
    budget: offer_picking.Budget,
) -> None:
    live = live_of(draft, spec.name, node_type.name)
    workers = [r for r in live if r.role is Role.WORKER and r.intent is Intent.RUNNING]
    wanted = min(max(node_type.min_workers, demand), node_type.max_workers)
    if len(workers) > node_type.max_workers:
        _scale_down(draft, workers, len(workers) - node_type.max_workers)
        return
    paused = draft.breaker(spec.name, node_type.name).paused_until
    if paused is not None and paused > draft.now:
        draft.notes.append(f"{spec.name}/{node_type.name}: launches paused by the breaker")
        return
    requests = _open_requests(draft, spec.name, node_type.name)
    shortfall = wanted - len(workers) - sum(len(r.open_slots) for r in requests)
    if shortfall > 0:
        requests.append(_place(draft, spec, node_type, shortfall))
    by_request: dict[str | None, list[InstanceRecord]] = {}
    for record in live:
        if record.role is Role.CANDIDATE:
            by_request.setdefault(record.request_id, []).append(record)
    for request in requests:
        have = by_request.get(request.id, [])
        _rent_for(draft, spec, node_type, request, have=have, offers=offers, budget=budget)


def _open_requests(draft: Draft, cluster: str, node_type: str) -> list[Request]:
    return [
        r
        for r in draft.requests.values()
        if r.cluster == cluster and r.node_type == node_type and r.status is RequestStatus.OPEN
    ]


def _place(draft: Draft, spec: ClusterSpec, node_type: NodeType, slots: int) -> Request:
    ident = draft.new_id("q")
    request = Request(
        id=ident,
        cluster=spec.name,
        node_type=node_type.name,
        managed_by=draft.lineage,
        placed_at=draft.now,
        provision_deadline=draft.now + spec.watchdogs.provision_deadline_seconds,
        slots=tuple(Slot(f"{ident}s{i}") for i in range(1, slots + 1)),
    )
    draft.requests[ident] = request
    return request


def _rent_for(
    draft: Draft,
    spec: ClusterSpec,
    node_type: NodeType,
    request: Request,
    *,
    have: list[InstanceRecord],
    offers: Sequence[Offer],
    budget: offer_picking.Budget,
) -> None:
    need = node_type.candidate_factor * len(request.open_slots) - len(have)
    if need <= 0:
        return
    selection = offer_picking.choose(
        offers,
        cluster=spec.name,
        node_type=node_type,
        count=need,
        blocked=_blocked(draft, spec.name),
        busy_machines=frozenset(r.machine_id for r in have),
        budget=budget,
    )
    draft.skipped.extend(selection.skipped)
    if selection.chosen and request.dispatched_at is None:
        draft.requests[request.id] = replace(request, dispatched_at=draft.now)
    for choice in selection.chosen:
        ident = draft.new_id("i")
        draft.add(
            Action(
                ActionKind.RENT,
                spec.name,
                "scale_up",
                f"candidate for request {request.id} ({len(request.open_slots)} open slot(s))",
                node_type=node_type.name,
                record=ident,
                request=request.id,
                label=label_for(spec.name, draft.lineage, ident),
                offer=choice,
                host_id=choice.host_id,
                dph_delta=choice.dph_total,
            )
        )
    if len(selection.chosen) < need:
        draft.unmet.append(Unmet(spec.name, node_type.name, need - len(selection.chosen)))
        draft.notes.append(
            f"{spec.name}/{node_type.name}: {need - len(selection.chosen)} candidate(s) of "
            f"request {request.id} found no acceptable offer"
        )


def _blocked(draft: Draft, cluster: str) -> dict[int, BlockEntry]:
    return {h: e for h, e in draft.blocklist.get(cluster, {}).items() if e.until > draft.now}


def _scale_down(draft: Draft, workers: list[InstanceRecord], surplus: int) -> None:
    """The newest unpinned workers go first: they hold the least work."""
    movable = sorted(
        (w for w in workers if not w.pinned), key=lambda w: w.enrolled_at or 0, reverse=True
    )
    for worker in movable[:surplus]:
        draft.destroy(worker, "scale_down", "more workers than max_workers")
