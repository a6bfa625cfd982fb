"""The reaper's refusals: most of a reaper is the list of reasons not to fire.

Every net that may destroy a machine walks these gates, in this order, before it may act
(DESIGN.md rule 1): not ours -> already destroyed -> work pinned -> exempt class -> inside the
grace window -> act. The first gate is the presence of our own provisioning record (its
`managed_by` is this state's lineage), not a list of known providers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reconciler.model.records import InstanceRecord


class Refusal(StrEnum):
    NOT_OURS = "not-ours"
    ALREADY_DESTROYED = "already-destroyed"
    PINNED = "pinned"
    EXEMPT = "exempt-class"
    IN_GRACE = "inside-grace-window"


@dataclass(frozen=True)
class Gate:
    """What one net asks of the reaper: its grace window and whether it reads heartbeats."""

    grace_seconds: float = 0.0
    heartbeat_net: bool = False
    respects_pin: bool = True


def refusal(
    record: InstanceRecord | None, *, lineage: str, now: float, gate: Gate
) -> Refusal | None:
    """Why `record` must not be destroyed now, or None when every gate is cleared."""
    if record is None or record.managed_by != lineage:
        return Refusal.NOT_OURS
    if not record.live:
        return Refusal.ALREADY_DESTROYED
    if gate.respects_pin and record.held(now):
        return Refusal.PINNED
    if gate.heartbeat_net and record.exempt:
        return Refusal.EXEMPT
    since = record.first_observed_at if record.first_observed_at is not None else record.created_at
    if now - since < gate.grace_seconds:
        return Refusal.IN_GRACE
    return None
