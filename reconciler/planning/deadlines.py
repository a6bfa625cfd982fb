"""When a cluster next needs a listing: the earliest deadline any of its records holds.

A limit has to fire within seconds of its threshold, not at the next 60-s reconcile (DESIGN.md 10,
"Limits on time"). The limits that a listing checks are kept as times on the records (when a
candidate was first seen running, the last listing that showed an instance, a request's
provisioning deadline, when a destroy or stop is due to be sent again); the earliest of them is
when the controller lists next. Pure: `now` is never read, the caller says after when to look.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.model import stopping
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.requestrecord import Request, RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.nets import candidate_limits, went_silent
from reconciler.planning import lifecycle
from reconciler.planning.requests import deadline_grace


def next_listing(
    instances: Iterable[InstanceRecord],
    requests: Iterable[Request],
    spec: ClusterSpec,
    *,
    after: float,
) -> float | None:
    """The earliest deadline of `spec`'s cluster strictly later than `after` (the last listing),
    or None when no record holds one. A deadline at or before `after` was already looked at by
    that listing; it is not asked for again (a refusal would otherwise list in a loop)."""
    return first_after(listing_deadlines(instances, requests, spec), after)


def first_after(times: Iterable[float], after: float) -> float | None:
    """The earliest of `times` strictly later than `after`, or None."""
    later = [t for t in times if t > after]
    return min(later) if later else None


def listing_deadlines(
    instances: Iterable[InstanceRecord], requests: Iterable[Request], spec: ClusterSpec
) -> tuple[float, ...]:
    """Every deadline of `spec`'s cluster that a listing checks, whatever the last listing."""
    return tuple(_deadlines(instances, requests, spec))


def _deadlines(
    records: Iterable[InstanceRecord], requests: Iterable[Request], spec: ClusterSpec
) -> Iterable[float]:
    instances = list(records)
    for record in instances:
        if record.cluster != spec.name or not record.live:
            continue
        limit = candidate_limits.deadline(record, spec)
        if limit is not None:
            yield limit
        start = lifecycle.start_deadline(record, spec)
        if start is not None:
            yield start
        if record.intent is not Intent.RUNNING and record.retry_at is not None:
            yield record.retry_at
        if record.phase is Phase.DESTROYING and record.ended_at is not None:
            # ended by the head (a report, a refused enrollment, an extra candidate): its slot
            # may need a replacement, or count for the breaker, now
            yield record.ended_at
        if record.phase is Phase.PENDING_CREATE:
            yield record.created_at + spec.watchdogs.orphan_grace_seconds
    deadline: dict[str, float] = {}
    for request in requests:
        if request.cluster == spec.name and request.status is RequestStatus.OPEN:
            yield request.provision_deadline
            deadline[request.id] = request.provision_deadline
    grace = deadline_grace(spec)
    for record in instances:
        # a candidate the deadline spares: it stalls its request once its grace is over
        if record.request_id not in deadline or record.role is not Role.CANDIDATE:
            continue
        seen = record.first_observed_at
        spared = (seen if seen is not None else record.created_at) + grace
        if record.live and spared > deadline[record.request_id]:
            yield spared


def net_deadlines(instances: Iterable[InstanceRecord], spec: ClusterSpec) -> dict[str, float]:
    """Per machine net (by its job name), the earliest time one of `spec`'s records reaches that
    net's threshold: the controller runs the net then, not at its next cadence (a worker silent
    for 300 s is ended at 300 s, not at up to 360 s)."""
    w = spec.watchdogs
    found: dict[str, float] = {}

    def at(job: str, when: float | None) -> None:
        if when is not None and (job not in found or when < found[job]):
            found[job] = when

    for r in instances:
        if r.cluster != spec.name or not r.live or r.intent is Intent.DESTROYED:
            continue
        if r.intent is Intent.RUNNING and r.role is Role.WORKER:
            last = went_silent.last_heard(r)
            if not r.exempt and last is not None:
                at("went_silent", last + w.went_silent_after_seconds)
            heard = [t for t in (r.provider_ok_at, r.probe_ok_at, r.self_report_at) if t]
            if heard and not r.lost:
                at("lost", max(heard) + w.lost_after_seconds)
        if r.vast_id is not None and r.self_report_at is None and r.enrolled_at is None:
            since = r.first_observed_at if r.first_observed_at is not None else r.created_at
            if not r.exempt:
                at("boot_failure", since + w.never_reported_seconds)
        if stopping.in_handshake(r):
            # the stop timer did its part (the ask); the handshake's next step is due when the
            # agent acknowledged, or when its acknowledgment is overdue (DESIGN.md 11)
            at("auto_stop", stopping.due(r, float(w.heartbeat_interval_seconds)))
        else:
            at("auto_stop", stopping.ask_at(r, float(w.heartbeat_interval_seconds)))
        at("auto_destroy", r.destroy_due_at)
    return found
