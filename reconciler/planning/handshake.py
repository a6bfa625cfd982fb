"""The plan's part of the money chain's stop handshake (DESIGN.md 11, `model.stopping`). Pure.

The routing table says "stop" for `idle_stop` (and `stop_unacknowledged`); for a worker with an
agent this decides which step of the handshake that is:

    not asked yet           ask: intent stopped, `stop_asked_at` (no call: the agent hears of it
                            in its next heartbeat answer); ledgered as `stop_pending`
    asked, acknowledged     the STOP action (`idle_stop`): the controller drains the node
                            through Ray first, then the executor calls vast's stop
    asked, overdue          the STOP action (`stop_unacknowledged`): no drain
    asked, waiting          nothing yet

A node type without an agent, and a stop that is not the money chain's, is stopped at once.
A worker in the handshake is still capacity (`planning.scaling`): its Ray runs until the
drain, so Ray places returning work on it first, and that traffic calls the stop off (the idle
scanner); demand alone never does (the fleet benchmark: a demand reading that counted the
quiet worker itself called 138 stops off, and idle waste went from 1.03x to 1.69x its floor).
"""

from __future__ import annotations

from reconciler.model import stopping
from reconciler.model.records import InstanceRecord
from reconciler.nets.detection import Detection
from reconciler.planning.draft import Draft

IDLE_STOP = "idle_stop"  # nets.idle.STOP: the stop that is asked of the agent first


def stop(draft: Draft, record: InstanceRecord, cls: str, detail: str) -> None:
    """The routing table's "stop" for this record, as the handshake has it."""
    if not stopping.handshakes(record) or cls not in (IDLE_STOP, stopping.UNACKNOWLEDGED):
        draft.stop(record, cls, detail)
        return
    if cls == stopping.UNACKNOWLEDGED or stopping.acknowledged(record):
        draft.stop(record, cls, detail)
        return
    if stopping.in_handshake(record) or record.id in draft.doomed:
        return  # asked: the agent's acknowledgment (or its deadline) is awaited
    asked = draft.update(stopping.asked(record, draft.now))
    draft.detections.append(
        Detection(
            asked.id,
            stopping.ASKED_CLASS,
            f'{detail}: intent stopped; the agent hears "stop pending" in its next heartbeat '
            "answer, and the node is drained and stopped once it acknowledges",
            asked.vast_id,
        )
    )
