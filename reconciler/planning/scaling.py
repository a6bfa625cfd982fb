"""From demand to candidates (first seed, steps 1-2) and back down to max_workers.

For each node type: the workers wanted are `min_workers` raised by Ray's pending demand and
capped by `max_workers`. A shortfall not covered by open requests becomes a new request of n
slots with its provisioning deadline fixed now. A request rents at most `candidate_factor x n`
candidates over its whole life (DESIGN.md 10), from the cheapest acceptable offers; how a request
then lives and ends is planning/requests.py. A lost worker is not capacity: Ray does not send it
work, so a replacement may be placed. A node type halted by a permanent failure (its image runs a
Ray or Python the head's Ray refuses: the head decides it at enrollment) rents nothing and fails
its open requests until its image or env changes, which lifts the halt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from reconciler import settings
from reconciler.model import stopping
from reconciler.model.labels import label_for
from reconciler.model.observed import Offer
from reconciler.model.plan import Action, ActionKind, SkippedOffer, Unmet
from reconciler.model.recordindex import RecordIndex
from reconciler.model.records import (
    BreakerState,
    InstanceRecord,
    Intent,
    Records,
    Role,
    breaker_key,
)
from reconciler.model.requestrecord import Request, RequestStatus, Slot
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.planning import breaker
from reconciler.planning import offers as offer_picking
from reconciler.planning.draft import Draft
from reconciler.planning.lifecycle import start_for_demand
from reconciler.planning.requests import RequestIndex, end_open_slots


def live_of(draft: Draft, cluster: str, node_type: str) -> list[InstanceRecord]:
    return [
        r
        for r in draft.of_node_type(cluster, node_type)
        if r.live and r.intent is not Intent.DESTROYED and r.id not in draft.doomed
    ]


def scale(
    draft: Draft,
    spec: ClusterSpec,
    node_type: NodeType,
    *,
    offers: Sequence[Offer],
    demand: int,
    budget: offer_picking.Budget,
    frozen: str | None = None,
    chosen: str | None = None,
) -> None:
    """Bring a node type to the workers wanted; `frozen` says why nothing may be rented now
    (the cluster's Ray head cannot be read: workers could not join it); `chosen`, why the
    packing launched this node type by price (`scheduling: cheapest`), kept with a request
    placed now."""
    breaker.reset_on_change(draft, spec, node_type)
    breaker.observe_lives(draft, spec, node_type)
    live = live_of(draft, spec.name, node_type.name)
    workers = [r for r in live if _capacity(r)]
    wanted = min(max(node_type.min_workers, demand), node_type.max_workers)
    if len(workers) > node_type.max_workers:
        _scale_down(draft, workers, len(workers) - node_type.max_workers)
        return
    requests = _open_requests(draft, spec.name, node_type.name)
    trying = sum(len(r.open_slots) for r in requests) + _joining(draft, spec.name, node_type.name)
    # a worker stopped deliberately comes back before anything is rented (DESIGN.md 10)
    started = start_for_demand(draft, spec, node_type, wanted - len(workers) - trying, budget)
    if _halted(draft, spec, node_type):
        return
    paused = draft.breaker(spec.name, node_type.name).paused_until
    subject = f"{spec.name}/{node_type.name}"
    if paused is not None and paused > draft.now:
        draft.note("breaker_paused", "launches paused by the breaker", subject)
        return
    if frozen is not None:
        draft.note("frozen", f"nothing rented: {frozen}", subject)
        return
    short = wanted - len(workers) - trying - started
    slots = paced(spec, node_type, breaker.headroom(draft, spec, node_type, short, trying), trying)
    if slots > 0:
        requests.append(_place(draft, spec, node_type, slots, chosen))
    index = RequestIndex.of(draft, spec.name)
    for request in requests:
        _rent_for(
            draft,
            spec,
            node_type,
            request,
            have=index.live(draft, request),
            left=index.left(request, node_type),
            offers=offers,
            budget=budget,
        )


def paced(spec: ClusterSpec, node_type: NodeType, slots: int, trying: int) -> int:
    """At most the slots whose candidates vast's create pace (one an account every
    `CREATE_PACE_SECONDS`) can rent before a request placed now reaches its provision deadline,
    less the open slots already trying (their candidates take the same pace). A request of 500
    slots at 4.6 s a create needed 2,300 s of creates against a 1,800-s deadline: its last ~100
    slots expired before their first candidate was sent (bench/scale_up.py). The rest of the
    demand is placed as the slots before it fill, each request with a deadline it can meet."""
    window = spec.watchdogs.provision_deadline_seconds
    room = int(window // (settings.CREATE_PACE_SECONDS * max(1, node_type.candidate_factor)))
    return max(0, min(slots, max(1, room) - trying))


def _joining(draft: Draft, cluster: str, node_type: str) -> int:
    """Open slots of requests a request watchdog ended that still have a live candidate: it
    may yet join as their worker (DESIGN.md 11), so it is capacity on the way, and a canary in
    flight (found by the adversary, seed 10: a no-consumer failure let a new request out while
    the old one's candidate still pulled, 3 rentals in a cycle bounded at 2)."""
    live = {
        r.request_id
        for r in draft.of_node_type(cluster, node_type)
        if r.role is Role.CANDIDATE
        and r.live
        and r.intent is not Intent.DESTROYED
        and r.id not in draft.doomed
    }
    return sum(
        len(r.open_slots)
        for r in draft.index.requests_of(cluster, node_type)
        if r.ended_by_watchdog and r.id in live
    )


def _halted(draft: Draft, spec: ClusterSpec, node_type: NodeType) -> bool:
    """A node type halted by a permanent failure rents nothing, and its open requests fail at
    once (their slots count toward the breaker, as every slot that ends with no worker does);
    a halt whose image and env are no longer the node type's is lifted."""
    state = draft.breaker(spec.name, node_type.name)
    halt = state.halt
    if halt is None:
        return False
    now = node_type.ray_fingerprint
    if halt.fingerprint != now:
        draft.set_breaker(spec.name, node_type.name, replace(state, halt=None))
        changed = "image" if halt.image != node_type.image else "env"
        why = (
            f"node type {node_type.name}: its {changed} changed since it was halted "
            f"({halt.image} -> {node_type.image}); launches resume (the halt was: {halt.reason})"
        )
        draft.detections.append(Detection(halt.record or "", "halt_lifted", why, cluster=spec.name))
        draft.note("halt_lifted", "halt lifted", f"{spec.name}/{node_type.name}")
        return False
    draft.note("halted", f"halted: {halt.reason}", f"{spec.name}/{node_type.name}")
    for request in _open_requests(draft, spec.name, node_type.name):
        end_open_slots(
            draft,
            spec,
            request,
            status=RequestStatus.FAILED,
            cls=halt.cls,
            why=f"request {request.id} of halted node type {node_type.name}: {halt.reason}",
        )
    return True


def _open_requests(draft: Draft, cluster: str, node_type: str) -> list[Request]:
    return [
        r for r in draft.index.requests_of(cluster, node_type) if r.status is RequestStatus.OPEN
    ]


def _capacity(record: InstanceRecord) -> bool:
    """A worker that counts as capacity. A lost worker is out of rotation: it is not capacity (a
    replacement may be placed) and not counted against max_workers either (else its replacement
    is scaled down at the cap)."""
    return (
        record.role is Role.WORKER
        and (record.intent is Intent.RUNNING or stopping.in_handshake(record))
        and record.live
        and not record.lost
    )


def halted(breakers: Mapping[str, BreakerState], spec: ClusterSpec, node_type: NodeType) -> bool:
    """Whether a permanent failure halts this node type as its image and env are now (the
    planner rents nothing for it; Ray's demand is packed onto the others)."""
    state = breakers.get(breaker_key(spec.name, node_type.name))
    if state is None:
        return False
    return state.halted(node_type.ray_fingerprint)


def short_of(records: Records, spec: ClusterSpec, node_type: str, wanted: int) -> int | None:
    """What a node type has there or coming when that is short of `wanted` workers (capped at
    its `max_workers`, as `scale` caps it), else None: the cluster needs planning now, not at
    the next reconcile. The one reading of `max_workers` outside the packing."""
    limit = spec.node_types.get(node_type)
    if limit is None:
        return None
    have = capacity(records.index, spec.name, node_type)
    return have if have < min(wanted, limit.max_workers) else None


def capacity(index: RecordIndex, cluster: str, node_type: str) -> int:
    """The nodes of a node type the planner counts as there or coming: its workers and the open
    slots of its open requests (what `scale` compares the wanted count with; Ray's demand reader
    adds its launches to this)."""
    workers = sum(1 for r in index.of_node_type(cluster, node_type) if _capacity(r))
    slots = sum(
        len(r.open_slots)
        for r in index.requests_of(cluster, node_type)
        if r.status is RequestStatus.OPEN
    )
    return workers + slots


def _place(
    draft: Draft, spec: ClusterSpec, node_type: NodeType, slots: int, chosen: str | None
) -> Request:
    ident = draft.new_id("q")
    request = Request(
        id=ident,
        cluster=spec.name,
        node_type=node_type.name,
        managed_by=draft.lineage,
        placed_at=draft.now,
        provision_deadline=draft.now + spec.watchdogs.provision_deadline_seconds,
        slots=tuple(Slot(f"{ident}s{i}") for i in range(1, slots + 1)),
        image=node_type.image,
        fingerprint=node_type.ray_fingerprint,
        digest=node_type.digest,
        chosen=chosen,
    )
    draft.add_request(request)
    return request


def _rent_for(
    draft: Draft,
    spec: ClusterSpec,
    node_type: NodeType,
    request: Request,
    *,
    have: list[InstanceRecord],
    left: int,
    offers: Sequence[Offer],
    budget: offer_picking.Budget,
) -> None:
    """Candidates for a request's open slots: `candidate_factor` per open slot alive at once,
    and never more than the `left` rentals of its life."""
    need = min(node_type.candidate_factor * len(request.open_slots) - len(have), left)
    if need <= 0 or draft.now >= request.provision_deadline:
        return
    selection = offer_picking.choose(
        offers,
        cluster=spec.name,
        node_type=node_type,
        count=need,
        blocked=breaker.blocked(draft, spec.name, node_type),
        busy_machines=frozenset(r.machine_id for r in have),
        budget=budget,
    )
    draft.skipped.extend(selection.skipped)
    if selection.chosen and request.dispatched_at is None:
        draft.requests[request.id] = replace(request, dispatched_at=draft.now)
    slots = max(1, len(request.open_slots))
    for rank, choice in enumerate(selection.chosen, start=len(have)):
        ident = draft.new_id("i")
        draft.rounds[ident] = rank // slots
        draft.add(
            Action(
                ActionKind.RENT,
                spec.name,
                "scale_up",
                f"candidate for request {request.id} ({len(request.open_slots)} open slot(s))"
                + (f"; {request.chosen}" if request.chosen else ""),
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
        why = f"{need - len(selection.chosen)} candidate(s) found no acceptable offer" + (
            f" ({_skip_summary(selection.skipped)})" if selection.skipped else ""
        )
        draft.note("no_offer", f"request {request.id}: {why}", f"{spec.name}/{node_type.name}")
        current = draft.requests[request.id]
        if current.dispatch_error != why:
            draft.requests[request.id] = replace(current, dispatch_error=why)


def _skip_summary(skipped: Sequence[SkippedOffer]) -> str:
    """Why offers were skipped, in one phrase for the ledger and `status`."""
    more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
    return f"offer {skipped[0].offer_id}: {skipped[0].why}{more}"


def _scale_down(draft: Draft, workers: list[InstanceRecord], surplus: int) -> None:
    """The newest unpinned workers go first: they hold the least work."""
    movable = sorted(
        (w for w in workers if not w.held(draft.now)),
        key=lambda w: w.enrolled_at or 0,
        reverse=True,
    )
    for worker in movable[:surplus]:
        draft.destroy(worker, "scale_down", "more workers than max_workers")
