"""From demand to candidates (first seed, steps 1-3 and 6) and back down to max_workers.

For each node type: the workers wanted are `min_workers` raised by Ray's pending demand and
capped by `max_workers`. A shortfall not covered by open requests becomes a new request of n
slots with its provisioning deadline fixed now. A request rents at most `candidate_factor x n`
candidates over its whole life (DESIGN.md 10), from the cheapest acceptable offers. A filled
request's other candidates are destroyed. A slot that can no longer be filled (its request's
live candidates plus the rentals it has left are fewer than its open slots) has ended with no
worker at that moment, and counts toward the rent-loop breaker at once; filling the same need
again is a new request, which the breaker may refuse. A lost worker is not capacity: Ray does not
send it work, so a replacement may be placed. A node type halted by a permanent failure (its
image runs a Ray or Python the head's Ray refuses: the head decides it at enrollment) rents
nothing and fails its open requests until its image or env changes, which lifts the halt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.model import stopping
from reconciler.model.labels import label_for
from reconciler.model.observed import Offer
from reconciler.model.plan import Action, ActionKind, SkippedOffer, Unmet
from reconciler.model.records import (
    InstanceRecord,
    Intent,
    Records,
    Request,
    RequestStatus,
    Role,
    Slot,
    breaker_key,
)
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal
from reconciler.planning import breaker
from reconciler.planning import offers as offer_picking
from reconciler.planning.draft import Draft
from reconciler.planning.lifecycle import apply_detections, start_for_demand


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
    """Close filled requests (destroying their extra candidates), expire overdue ones, end the
    slots no candidate can fill any more, and end the candidates of requests that ended."""
    index = RequestIndex.of(draft, spec.name)
    for request in list(draft.requests.values()):
        if request.cluster != spec.name:
            continue
        if request.status is not RequestStatus.OPEN:
            _end_leftovers(draft, request, index)
            _end_abandoned(draft, request, spec, index)
        elif not request.open_slots:
            _close_filled(draft, request, index)
        elif draft.now >= request.provision_deadline:
            _expire(draft, request, spec, index)
        else:
            _end_hopeless_slots(draft, request, spec, index)


@dataclass
class RequestIndex:
    """One cluster's candidates by request, and the rentals each request has used, built once
    per plan (a scan of every record per request would make planning quadratic)."""

    candidates: dict[str, list[InstanceRecord]]
    used: dict[str, int]

    @classmethod
    def of(cls, draft: Draft, cluster: str) -> RequestIndex:
        candidates: dict[str, list[InstanceRecord]] = {}
        used: dict[str, int] = {}
        for r in draft.instances.values():
            if r.cluster != cluster or r.request_id is None:
                continue
            # a create that never left a billed instance (offer gone, nothing rentable) is no
            # rental; everything else, ended or not, is
            if r.vast_id is not None or r.live:
                used[r.request_id] = used.get(r.request_id, 0) + 1
            if r.live and r.role is Role.CANDIDATE and r.intent is not Intent.DESTROYED:
                candidates.setdefault(r.request_id, []).append(r)
        return cls(candidates, used)

    def live(self, draft: Draft, request: Request) -> list[InstanceRecord]:
        """The request's candidates still alive in the draft (not doomed, not ended since)."""
        return [
            c
            for c in self.candidates.get(request.id, [])
            if c.id not in draft.doomed and draft.instances[c.id].intent is not Intent.DESTROYED
        ]

    def left(self, request: Request, node_type: NodeType) -> int:
        """Rentals a request may still make: `candidate_factor x n` over its whole life."""
        cap = node_type.candidate_factor * len(request.slots)
        return max(0, cap - self.used.get(request.id, 0))


def _end_hopeless_slots(
    draft: Draft, request: Request, spec: ClusterSpec, index: RequestIndex
) -> None:
    """Slots that neither a live candidate nor a rental left can fill: ended with no worker now."""
    node_type = spec.node_types.get(request.node_type)
    if node_type is None:
        return
    live = len(index.live(draft, request))
    left = index.left(request, node_type)
    hopeless = len(request.open_slots) - (live + left)
    if hopeless <= 0:
        return
    cap = node_type.candidate_factor * len(request.slots)
    why = (
        f"{hopeless} slot(s) of request {request.id} ended with no worker: every candidate "
        f"ended without enrolling ({cap - left} of {cap} rentals used)"
    )
    end_open_slots(
        draft,
        spec,
        request,
        status=RequestStatus.EXPIRED,
        cls="no_worker",
        why=why,
        count=hopeless,
    )


def deadline_grace(spec: ClusterSpec) -> float:
    """How long a candidate is spared by its request's provisioning deadline from our first
    observation of it: the grace window the orphan sweep gives an instance we did not record
    (a candidate rented a minute before the deadline had no chance to fail)."""
    return float(spec.watchdogs.orphan_grace_seconds)


def end_open_slots(
    draft: Draft,
    spec: ClusterSpec,
    request: Request,
    *,
    status: RequestStatus,
    cls: str,
    why: str,
    count: int | None = None,
) -> None:
    """End `count` (default: all) of a request's open slots with no worker, ledger it, and count
    them toward the breaker; the request ends with `status` once no slot is open."""
    ending = request.open_slots[-count:] if count else request.open_slots
    if not ending:
        return
    ids = {s.id for s in ending}
    slots = tuple(
        replace(s, ended_without_worker=True) if s.id in ids else s for s in request.slots
    )
    updated = replace(request, slots=slots)
    if not updated.open_slots:
        filled = any(s.worker for s in slots)
        updated = replace(
            updated, status=RequestStatus.FILLED if filled else status, ended_reason=cls
        )
    draft.requests[request.id] = updated
    draft.detections.append(Detection(request.id, "slots_no_worker", why, cluster=spec.name))
    breaker.count_empty_slots(draft, spec, request.node_type, len(ending))


def _end_leftovers(draft: Draft, request: Request, index: RequestIndex) -> None:
    """A request that ended (filled, expired, failed by a halt) keeps no candidates: nobody will
    let them enroll, and they bill while they pull. One a request watchdog ended keeps them:
    those watchdogs never touch a machine, and its candidates may still join as workers."""
    if request.ended_by_watchdog:
        return
    for extra in _reapable(draft, index.live(draft, request)):
        draft.destroy(extra, "extra_candidate", f"request {request.id} is {request.status.value}")


def _end_abandoned(draft: Draft, request: Request, spec: ClusterSpec, index: RequestIndex) -> None:
    """A request a watchdog ended keeps its candidates; once every one of them has ended by a
    machine's fault (its own limits) without joining, its open slots ended with no worker and
    count toward the breaker (DESIGN.md 11). One that rented nothing counts nothing."""
    if not (request.ended_by_watchdog and request.open_slots):
        return
    if index.live(draft, request) or not index.used.get(request.id, 0):
        return
    why = (
        f"{len(request.open_slots)} slot(s) of request {request.id} ({request.ended_reason}) "
        "ended with no worker: its candidates ended without joining"
    )
    end_open_slots(
        draft,
        spec,
        request,
        status=request.status,
        cls=request.ended_reason or "no_worker",
        why=why,
    )


def _reapable(draft: Draft, records: list[InstanceRecord]) -> list[InstanceRecord]:
    """Those the reaper's refusals let the planner end (not ours, ended, pinned: kept)."""
    return [
        r for r in records if refusal(r, lineage=draft.lineage, now=draft.now, gate=Gate()) is None
    ]


def _close_filled(draft: Draft, request: Request, index: RequestIndex) -> None:
    draft.requests[request.id] = replace(request, status=RequestStatus.FILLED)
    for extra in _reapable(draft, index.live(draft, request)):
        draft.destroy(extra, "extra_candidate", f"request {request.id} has a worker in every slot")


def _expire(draft: Draft, request: Request, spec: ClusterSpec, index: RequestIndex) -> None:
    """Past its provisioning deadline a request rents nothing more; its candidates that had
    their grace window (reaper gate 5: `deadline_grace`, from our first observation of them)
    stalled it and are ended with their hosts blocklisted; one still inside it is left to its
    own limits, and the request's slots end once none is left."""
    empty = len(request.open_slots)
    why = f"request {request.id} passed its provisioning deadline with {empty} empty slot(s)"
    grace = Gate(grace_seconds=deadline_grace(spec))
    live = index.live(draft, request)
    stalled = [
        c for c in live if refusal(c, lineage=draft.lineage, now=draft.now, gate=grace) is None
    ]
    found = [Detection(c.id, "provision_deadline", why, c.vast_id) for c in stalled]
    apply_detections(draft, found, spec)
    young = [c for c in live if c not in stalled and not c.held(draft.now)]
    if young:
        draft.notes.append(
            f"{spec.name}/{request.node_type}: request {request.id} is past its deadline; "
            f"{len(young)} candidate(s) first seen within the grace window keep their own limits"
        )
        return
    end_open_slots(
        draft, spec, request, status=RequestStatus.EXPIRED, cls="provision_deadline", why=why
    )


def scale(
    draft: Draft,
    spec: ClusterSpec,
    node_type: NodeType,
    *,
    offers: Sequence[Offer],
    demand: int,
    budget: offer_picking.Budget,
    frozen: str | None = None,
) -> None:
    """Bring a node type to the workers wanted; `frozen` says why nothing may be rented now
    (the cluster's Ray head cannot be read: workers could not join it)."""
    breaker.reset_on_change(draft, spec, node_type)
    breaker.observe_lives(draft, spec, node_type)
    live = live_of(draft, spec.name, node_type.name)
    workers = [r for r in live if _capacity(r)]
    wanted = min(max(node_type.min_workers, demand), node_type.max_workers)
    if len(workers) > node_type.max_workers:
        _scale_down(draft, workers, len(workers) - node_type.max_workers)
        return
    requests = _open_requests(draft.requests, spec.name, node_type.name)
    trying = sum(len(r.open_slots) for r in requests) + _joining(draft, spec.name, node_type.name)
    # a worker stopped deliberately comes back before anything is rented (DESIGN.md 10)
    started = start_for_demand(draft, spec, node_type, wanted - len(workers) - trying, budget)
    if _halted(draft, spec, node_type):
        return
    paused = draft.breaker(spec.name, node_type.name).paused_until
    if paused is not None and paused > draft.now:
        draft.notes.append(f"{spec.name}/{node_type.name}: launches paused by the breaker")
        return
    if frozen is not None:
        draft.notes.append(f"{spec.name}/{node_type.name}: nothing rented: {frozen}")
        return
    short = wanted - len(workers) - trying - started
    slots = breaker.headroom(draft, spec, node_type, short, trying)
    if slots > 0:
        requests.append(_place(draft, spec, node_type, slots))
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


def _joining(draft: Draft, cluster: str, node_type: str) -> int:
    """Open slots of requests a request watchdog ended that still have a live candidate: it
    may yet join as their worker (DESIGN.md 11), so it is capacity on the way, and a canary in
    flight (found by the adversary, seed 10: a no-consumer failure let a new request out while
    the old one's candidate still pulled, 3 rentals in a cycle bounded at 2)."""
    live = {
        r.request_id
        for r in draft.instances.values()
        if r.cluster == cluster
        and r.role is Role.CANDIDATE
        and r.live
        and r.intent is not Intent.DESTROYED
        and r.id not in draft.doomed
    }
    return sum(
        len(r.open_slots)
        for r in draft.requests.values()
        if r.cluster == cluster
        and r.node_type == node_type
        and r.ended_by_watchdog
        and r.id in live
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
        draft.notes.append(f"{spec.name}/{node_type.name}: halt lifted")
        return False
    draft.notes.append(f"{spec.name}/{node_type.name}: halted: {halt.reason}")
    for request in _open_requests(draft.requests, spec.name, node_type.name):
        end_open_slots(
            draft,
            spec,
            request,
            status=RequestStatus.FAILED,
            cls=halt.cls,
            why=f"request {request.id} of halted node type {node_type.name}: {halt.reason}",
        )
    return True


def _open_requests(requests: Mapping[str, Request], cluster: str, node_type: str) -> list[Request]:
    return [
        r
        for r in requests.values()
        if r.cluster == cluster and r.node_type == node_type and r.status is RequestStatus.OPEN
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


def halted(records: Records, spec: ClusterSpec, node_type: NodeType) -> bool:
    """Whether a permanent failure halts this node type as its image and env are now (the
    planner rents nothing for it; Ray's demand is packed onto the others)."""
    state = records.breakers.get(breaker_key(spec.name, node_type.name))
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
    have = capacity(records.instances, records.requests, spec.name, node_type)
    return have if have < min(wanted, limit.max_workers) else None


def capacity(
    instances: Mapping[str, InstanceRecord],
    requests: Mapping[str, Request],
    cluster: str,
    node_type: str,
) -> int:
    """The nodes of a node type the planner counts as there or coming: its workers and the open
    slots of its open requests (what `scale` compares the wanted count with; Ray's demand reader
    adds its launches to this)."""
    workers = sum(
        1
        for r in instances.values()
        if r.cluster == cluster and r.node_type == node_type and _capacity(r)
    )
    slots = sum(len(r.open_slots) for r in _open_requests(requests, cluster, node_type))
    return workers + slots


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
        image=node_type.image,
        fingerprint=node_type.ray_fingerprint,
        digest=node_type.digest,
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
        why = f"{need - len(selection.chosen)} candidate(s) found no acceptable offer" + (
            f" ({_skip_summary(selection.skipped)})" if selection.skipped else ""
        )
        draft.notes.append(f"{spec.name}/{node_type.name}: request {request.id}: {why}")
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
