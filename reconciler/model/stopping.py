"""The money chain's stop as a handshake with the agent (DESIGN.md 11). Pure.

Ray ends a drained idle raylet at once, and vast carries a stop out seconds after the call, so
an agent that learnt of the stop only from vast's TERM saw Ray exit first and ended as
`ray_exited`: a destroy, the disk lost. So the agent hears of the stop before Ray is drained:

    asked         the auto-stop net found the worker quiet past its stop timer: intent stopped,
                  `stop_asked_at`; every heartbeat answer says "stop": "pending"
    acknowledged  a heartbeat carries "stop": "acknowledged" (the agent sends one at once when
                  it hears "pending"): `stop_acked_at`. From here Ray's exit is part of the stop
                  for the agent, so the node is drained through Ray (idle termination), then
                  vast's stop is called (the executor: phase stopping); on TERM the agent
                  reports, hears "deliberate stop" and keeps its identity (DESIGN.md 10)
    cancelled     before vast's stop is called, a drain Ray rejects (work is there), traffic, a
                  person's pin or Ray's demand calls the stop off: intent back to running, the
                  timers cleared, `stop_cancelled_at`; the next heartbeat answer says "stop":
                  "cancelled" (the agent serves on), and a heartbeat without the
                  acknowledgment then closes it
    unacknowledged  no acknowledgment within `ACK_INTERVALS` heartbeat intervals (and
                  `ACK_SLACK` seconds): an agent that does not speak the handshake (one from
                  before it) or whose heartbeats do not get through. It is stopped without the
                  drain: Ray is not asked to end the node, so the TERM comes while Ray runs and
                  the agent's report of it keeps the disk, as a deliberate stop did before the
                  handshake. The drain only helped Ray's bookkeeping; the disk is what the user
                  would lose.

A node type without an agent (`agent: false`, exempt) has no one to ask: it is drained and
stopped at once, as before.
"""

from __future__ import annotations

from reconciler.model.evolve import evolve
from reconciler.model.records import InstanceRecord, Intent, Phase, Role

PENDING = "pending"  # the heartbeat answer's "stop" while a stop is under way
CANCELLED = "cancelled"  # the heartbeat answer's "stop" once, after a stop was called off
ACKNOWLEDGED = "acknowledged"  # the heartbeat's "stop" while the agent waits for the stop

ACK_INTERVALS = 2
ACK_SLACK = 10.0

# Ledger classes of the handshake (notes; the unacknowledged stop is a decision: it stops).
ASKED_CLASS = "stop_pending"
ACKED_CLASS = "stop_acknowledged"
CANCELLED_CLASS = "stop_cancelled"
UNACKNOWLEDGED = "stop_unacknowledged"


def handshakes(record: InstanceRecord) -> bool:
    """Whether a stop of this record is asked of its agent first: a worker with an agent."""
    return record.role is Role.WORKER and not record.exempt


def asked(record: InstanceRecord, now: float) -> InstanceRecord:
    """The record once the head asked for the stop: intent stopped (before any call)."""
    return evolve(
        record,
        intent=Intent.STOPPED,
        stop_asked_at=now,
        stop_acked_at=None,
        stop_cancelled_at=None,
    )


def in_handshake(record: InstanceRecord) -> bool:
    """Asked and vast's stop not called yet (the executor moves the phase to stopping at the
    call; a listing keeps the phase of a record in the handshake)."""
    return (
        record.live
        and record.intent is Intent.STOPPED
        and record.stop_asked_at is not None
        and record.phase not in (Phase.STOPPING, Phase.STOPPED)
    )


def under_way(record: InstanceRecord) -> bool:
    """A stop the head asked of the agent and has not called off: its heartbeats hear
    "pending" (from the ask to the TERM)."""
    return record.live and record.intent is Intent.STOPPED and record.stop_asked_at is not None


def ask_at(record: InstanceRecord, heartbeat_interval: float) -> float | None:
    """When the money chain asks for the stop: one heartbeat interval before the stop timer
    falls due for a worker whose agent is asked first, so that its acknowledgment is in by then
    and vast's stop is called at the timer, as the seed's chain has it (the fleet benchmark:
    asked at the timer, every idle stop came up to 30 s late, idle waste 1.07x of its floor);
    at the timer for the others. Traffic meanwhile calls the stop off."""
    if record.stop_due_at is None:
        return None
    return record.stop_due_at - (heartbeat_interval if handshakes(record) else 0.0)


def acknowledged(record: InstanceRecord) -> bool:
    return in_handshake(record) and record.stop_acked_at is not None


def ack_deadline(record: InstanceRecord, heartbeat_interval: float) -> float | None:
    """When an unacknowledged stop goes ahead without the drain (None: not waiting for one)."""
    if not in_handshake(record) or record.stop_acked_at is not None:
        return None
    assert record.stop_asked_at is not None
    return record.stop_asked_at + ACK_INTERVALS * heartbeat_interval + ACK_SLACK


def due(record: InstanceRecord, heartbeat_interval: float) -> float | None:
    """When the handshake's next step is the controller's (the drain and the call, or the
    unacknowledged stop): the auto-stop net runs then."""
    if acknowledged(record):
        assert record.stop_acked_at is not None
        return max(record.stop_acked_at, record.stop_due_at or record.stop_acked_at)
    return ack_deadline(record, heartbeat_interval)


def cancelled(record: InstanceRecord, now: float) -> InstanceRecord:
    """A stop called off before vast's stop: running again, its timers cleared, the agent to be
    told. Anything else is returned as it is."""
    if not in_handshake(record):
        return record
    return evolve(
        record,
        intent=Intent.RUNNING,
        stop_asked_at=None,
        stop_acked_at=None,
        stop_cancelled_at=now,
        stop_due_at=None,
        destroy_due_at=None,
    )


def resumed(record: InstanceRecord, now: float) -> InstanceRecord:
    """A stopped worker to be started again at `now`: intent running, the handshake's marks and
    the money chain's timers cleared, its call attempts afresh."""
    return evolve(
        record,
        intent=Intent.RUNNING,
        start_requested_at=now,
        stop_asked_at=None,
        stop_acked_at=None,
        stop_cancelled_at=None,
        stop_due_at=None,
        destroy_due_at=None,
        call_attempts=0,
        retry_at=None,
    )


def answer(record: InstanceRecord) -> str | None:
    """What the next heartbeat answer says of a stop: "pending", "cancelled" or nothing."""
    if under_way(record):
        return PENDING
    if record.intent is Intent.RUNNING and record.stop_cancelled_at is not None:
        return CANCELLED
    return None


def heard(record: InstanceRecord, ack: bool, now: float) -> InstanceRecord:
    """A heartbeat's word on the stop: the first acknowledgment of a stop asked and not called
    yet is kept (one after the call changes nothing: the stop went ahead without it); a
    heartbeat without one after a cancel closes it (the agent no longer waits for a stop, or
    never heard of it)."""
    if ack and in_handshake(record) and record.stop_acked_at is None:
        return evolve(record, stop_acked_at=now)
    if not ack and record.stop_cancelled_at is not None and record.intent is Intent.RUNNING:
        return evolve(record, stop_cancelled_at=None)
    return record
