"""A person's pin on a machine, as a pure change of the records (`ray-vast pin` / `unpin`).

One decision serves both ways a pin arrives: `ray-vast pin` changing the state file itself (no
controller running), and a running `watch` taking the order from its mailbox under its own lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from reconciler.model.orders import PinOrder
from reconciler.model.records import InstanceRecord, Intent, Records


class PinRefused(ValueError):
    """The order names no live record of ours; the message says what to do."""


@dataclass(frozen=True)
class PinOutcome:
    records: Records
    record: InstanceRecord  # as it was before
    changed: bool
    message: str  # the ledger line
    data: dict[str, object] = field(default_factory=dict)
    cls: str = "pin"  # the ledger class: pin or unpin


def decide(records: Records, order: PinOrder, *, lineage: str, now: float) -> PinOutcome:
    record = target(records, order.target, lineage, "unpin" if order.unpin else "pin")
    return _unpin(records, record, order, now) if order.unpin else _pin(records, record, order, now)


def _pin(records: Records, record: InstanceRecord, order: PinOrder, now: float) -> PinOutcome:
    until = now + order.seconds if order.seconds is not None else None
    by = order.who if not order.reason else f"{order.who} ({order.reason})"
    again = in_force(record, now)
    pinned = replace(record, pinned_by=by, pinned_until=until)
    span = f"until {utc_text(until)}" if until is not None else "until `ray-vast unpin`"
    verb = "pin replaced" if again else "pinned"
    return PinOutcome(
        replace(records, instances={**records.instances, record.id: pinned}),
        record,
        True,
        f"{verb} by {order.who} {span}" + (f": {order.reason}" if order.reason else ""),
        {
            "who": order.who,
            "reason": order.reason,
            "until": until,
            "replaces": _data(record) if again else None,
        },
    )


def _unpin(records: Records, record: InstanceRecord, order: PinOrder, now: float) -> PinOutcome:
    if record.pinned_by is None:
        return PinOutcome(records, record, False, "not pinned by a person", cls="unpin")
    ended = not in_force(record, now)
    unpinned = replace(record, pinned_by=None, pinned_until=None)
    return PinOutcome(
        replace(records, instances={**records.instances, record.id: unpinned}),
        record,
        True,
        f"unpinned by {order.who} (was pinned by {record.pinned_by}"
        + (", already ended)" if ended else ")"),
        {"who": order.who, "was": _data(record)},
        cls="unpin",
    )


def target(records: Records, text: str, lineage: str, op: str) -> InstanceRecord:
    """The live record a person named by vast instance id (digits) or record id (`i12`)."""
    text = text.strip().removeprefix("instance.")
    if text.isdigit():
        # A vast id is one machine; an ended record of it may be kept beside a live one.
        found = sorted(
            (r for r in records.instances.values() if r.vast_id == int(text)),
            key=lambda r: not r.live,
        )
        if not found:
            raise PinRefused(
                f"no record of vast instance {text} in this state; `ray-vast status` lists them"
            )
        record = found[0]
    elif (named := records.instances.get(text)) is not None:
        record = named
    else:
        raise PinRefused(f"no record {text!r} in this state; `ray-vast status` lists them")
    if record.managed_by != lineage:
        raise PinRefused(
            f"{name(record)} belongs to another state (lineage {record.managed_by[:8]}, this one "
            f"is {lineage[:8]}); {op} it with that state's --state-dir"
        )
    if not record.live or record.intent is Intent.DESTROYED:
        why = record.ended_reason or record.phase.value
        raise PinRefused(f"{name(record)} has ended ({why}); there is nothing to {op}")
    return record


def name(record: InstanceRecord) -> str:
    vast = f"vast {record.vast_id}, " if record.vast_id is not None else ""
    return f"{record.id} ({vast}{record.cluster}/{record.node_type})"


def holding(record: InstanceRecord, now: float) -> str | None:
    """What holds `record` at `now`, in words for the ledger and `status` ("Ray work on its
    node", "a pin by alice until 14:05 UTC"), or None when nothing does. The same holds as
    `InstanceRecord.held` (reaper gate 3): a prune waits for them too (DESIGN.md 11)."""
    if not record.held(now):
        return None
    why = ["Ray work on its node"] if record.pinned else []
    if in_force(record, now):
        until = record.pinned_until
        span = f"until {utc_text(until)}" if until is not None else "until `ray-vast unpin`"
        why.append(f"a pin by {record.pinned_by} {span}")
    return " and ".join(why)


def in_force(record: InstanceRecord, now: float) -> bool:
    return record.pinned_by is not None and (
        record.pinned_until is None or now < record.pinned_until
    )


def _data(record: InstanceRecord) -> dict[str, object]:
    return {"by": record.pinned_by, "until": record.pinned_until}


def utc_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
