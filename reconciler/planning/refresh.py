"""Refresh: fold one complete listing into the records, without deciding anything.

This is bookkeeping, the way `terraform refresh` is: when we first saw an instance, when vast last
showed it, when it first ran, which phase vast's status puts it in, and which pending create the
listing shows under its label (a lost create response is adopted here, not rented again). Every
decision is left to the checks that read the refreshed records.
"""

from __future__ import annotations

from reconciler.model import stopping
from reconciler.model.diagnostics import Diagnostic, plan_note
from reconciler.model.evolve import evolve
from reconciler.model.observed import Instance
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request
from reconciler.model.stretches import dark_from, lit_again, running_again, stopped_from

# vast's statuses before the container runs; `None` is "being provisioned".
BOOTING_STATUSES = frozenset({None, "created", "loading", "scheduling", "rebooting"})


def refresh(
    records: Records, listing: tuple[Instance, ...], now: float
) -> tuple[Records, list[Diagnostic]]:
    """Records updated from a complete listing, and notes of what was adopted."""
    by_id = {i.id: i for i in listing}
    by_label = {i.label: i for i in listing if i.label}
    notes: list[Diagnostic] = []
    updated: dict[str, InstanceRecord] = {}
    for record in records.instances.values():
        if not record.live:
            updated[record.id] = record
            continue
        current = record
        if current.vast_id is None:
            current = _adopt(current, by_label.get(current.label), notes)
        seen = by_id.get(current.vast_id) if current.vast_id is not None else None
        if seen is not None:
            updated[current.id] = observe(current, seen, now)
        elif current.vast_id is not None and current.missing_since is None:
            updated[current.id] = evolve(current, missing_since=now)
        else:
            updated[current.id] = current
    requests = dict(records.requests)
    for record in list(updated.values()):
        if record.role is Role.WORKER and record.slot_id is None and record.request_id in requests:
            updated[record.id], requests[record.request_id] = _fill_slot(
                record, requests[record.request_id]
            )
    return evolve(records, instances=updated, requests=requests), notes


def _fill_slot(record: InstanceRecord, request: Request) -> tuple[InstanceRecord, Request]:
    """A worker of an exempt class (no agent, so no enrollment) takes its request's first open
    slot, as an enrolling candidate would; without it the planner would rent for the slot again."""
    free = request.open_slots
    if not free:
        return record, request
    slot = free[0]
    slots = tuple(evolve(s, worker=record.id) if s.id == slot.id else s for s in request.slots)
    return evolve(record, slot_id=slot.id), evolve(request, slots=slots)


def _adopt(
    record: InstanceRecord, seen: Instance | None, notes: list[Diagnostic]
) -> InstanceRecord:
    if seen is None or record.phase is not Phase.PENDING_CREATE:
        return record
    notes.append(
        plan_note(
            "adopted",
            f"adopted instance {seen.id} for pending create {record.id} (label {record.label})",
        )
    )
    return record.rented(seen.id)


# Statuses of an instance vast lists but does not run, with no stop of ours: it bills storage.
DARK = frozenset({"unknown", "offline", "exited", "frozen"})


def observe(record: InstanceRecord, seen: Instance, now: float) -> InstanceRecord:
    """One record seen in the listing at `now`."""
    status = seen.actual_status
    record = evolve(
        record,
        provider_seen_at=now,
        missing_since=None,
        first_observed_at=record.first_observed_at or now,
        phase=_phase(record, status),
        listed_ip=seen.public_ipaddr or record.listed_ip,
    )
    if status == "running":
        first = record.first_running_at or now
        uptime = seen.uptime_mins
        since = now if uptime is None else min(now, max(record.created_at, now - uptime * 60))
        record = evolve(
            lit_again(running_again(record, since, now), now),
            provider_ok_at=now,
            first_running_at=first,
            ran_from=record.ran_from if record.ran_from is not None else since,
        )
    elif status == "stopped":
        record = stopped_from(record, now)  # billing storage only (stopped by us or by vast)
    elif status in DARK and record.provider_ok_at is not None:
        record = dark_from(record, record.provider_ok_at)  # vast bills its storage alone
    if record.phase is Phase.STOPPED and record.intent is Intent.STOPPED:
        record = evolve(record, call_attempts=0, retry_at=None)  # vast confirmed the stop
    if record.exempt and status == "running" and record.role is Role.CANDIDATE:
        # A node type without an agent never enrolls: running is as far as it can tell us.
        record = evolve(record, role=Role.WORKER, enrolled_at=now, public_ip=seen.public_ipaddr)
    return record


def _phase(record: InstanceRecord, status: str | None) -> Phase:
    """vast's status, mapped onto our phases, never undoing what only we can know."""
    if record.intent is Intent.DESTROYED:
        return Phase.DESTROYING
    if record.intent is Intent.STOPPED:
        if status == "running" and stopping.in_handshake(record):
            return record.phase  # asked of the agent, not called yet (DESIGN.md 11)
        return Phase.STOPPED if status == "stopped" else Phase.STOPPING
    if record.phase in (Phase.ENROLLED, Phase.SERVING) and status == "running":
        return record.phase
    if status == "stopped":
        return Phase.STOPPED
    if status == "running":
        return Phase.RUNNING if record.enrolled_at is None else Phase.ENROLLED
    if status in BOOTING_STATUSES:
        return Phase.PULLING
    return record.phase
