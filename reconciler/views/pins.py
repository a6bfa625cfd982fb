"""What `ray-vast pin` and `ray-vast unpin` say to the person, once the pin is decided.

The decision is `planning/pins.py`; this module only words its outcome: what holds the machine
now, until when, and what may end it again.
"""

from __future__ import annotations

from reconciler.model.orders import PinOrder
from reconciler.planning import pins
from reconciler.planning.pins import PinOutcome


def said(outcome: PinOutcome, order: PinOrder) -> str:
    record = outcome.record
    name = pins.name(record)
    ray = " Ray reports work on it, which still holds it." if record.pinned else ""
    if order.unpin and not outcome.changed:
        return f"{name} is not pinned by a person: nothing to unpin.{ray}"
    if order.unpin:
        return (
            f"{name} unpinned (was pinned by {record.pinned_by}): the watchdogs and the money "
            f"chain may end it again.{ray}"
        )
    until = outcome.data.get("until")
    span = f"until {pins.utc_text(float(until))}" if isinstance(until, float) else "until unpinned"
    again = " (the previous pin is replaced)" if outcome.data.get("replaces") else ""
    by = order.who if not order.reason else f"{order.who} ({order.reason})"
    return (
        f"{name} pinned {span} by {by}{again}: no watchdog, money-chain step or scale-down will "
        "stop or destroy it."
    )
