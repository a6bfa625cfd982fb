"""The life of a request (first seed, steps 3 and 6; DESIGN.md 10): settled every plan.

A filled request closes and its other candidates are destroyed. An overdue one expires (its
candidates past their own limits end; young ones keep theirs). A slot that can no longer be filled
(its request's live candidates plus the rentals it has left are fewer than its open slots) has
ended with no worker at that moment, and counts toward the rent-loop breaker at once; filling the
same need again is a new request, which the breaker may refuse. A request that ended leaves no
candidate behind.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.model.records import InstanceRecord, Intent, Role
from reconciler.model.requestrecord import Request, RequestStatus
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal
from reconciler.planning import breaker
from reconciler.planning.draft import Draft
from reconciler.planning.lifecycle import apply_detections


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
        for r in draft.of_cluster(cluster):
            if r.request_id is None:
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
        draft.note(
            "deadline_young_candidates",
            f"request {request.id} is past its deadline; {len(young)} candidate(s) first seen "
            "within the grace window keep their own limits",
            f"{spec.name}/{request.node_type}",
        )
        return
    end_open_slots(
        draft, spec, request, status=RequestStatus.EXPIRED, cls="provision_deadline", why=why
    )
