"""Reports: the reason a container gives before it destroys its own instance (pure).

vast keeps no container log after a destroy, so this is the only record of why a worker ended:
every report goes to the ledger (and the head's log), trusted or not. A report is trusted when it
carries the join token of the instance that sends it (used or not: a worker's token stays known
while its record lives). A trusted report also ends the record here: intent destroyed, phase
destroying, so no net acts on a machine that is already destroying itself, and the planner's
finishing destroy confirms it with vast if the worker's own destroy never lands.

One report does not end the record: a deliberate stop (DESIGN.md 10). When a worker reports the
TERM of a stop the head asked for itself (the money chain recorded intent `stopped` before the
call to vast), the answer says `deliberate_stop`: the worker stops Ray cleanly, keeps its
certificate and key on the container's disk and lets the container stop, and the record keeps
its intent (`stopped_deliberately_at` says the worker may resume once the head starts the
instance again). The decision's outcome is True exactly then. Any other report of a worker whose
intent is stopped (Ray exited, no heartbeat success, ...) is an ending as always.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.head import decisions as dec
from reconciler.head import tokens
from reconciler.head.messages import Report
from reconciler.model.records import InstanceRecord, Intent, Records, Role
from reconciler.model.stretches import stop_heard
from reconciler.state.ledger import LedgerKind

LEDGER_CLASS = "worker_report"
DELIBERATE_CLASS = "deliberate_stop"
SIGNAL = "signal"  # the reason of a TERM, INT or HUP to PID 1 (agent-report.v1.json)


def deliberate(record: InstanceRecord, message: Report) -> bool:
    """Whether this report is a worker's answer to a stop the head asked for: the report of a
    signal to a worker, whose record's intent is stopped (set before the call to vast)."""
    return (
        record.live
        and record.intent is Intent.STOPPED
        and record.role is Role.WORKER
        and message.phase == "worker"
        and message.reason == SIGNAL
    )


def report(
    records: Records, message: Report, *, cluster: str, lineage: str, now: float
) -> dec.Decision[bool]:
    token = records.tokens.get(tokens.digest(message.token))
    record = records.instances.get(token.record_id) if token is not None else None
    trusted = (
        token is not None
        and record is not None
        and dec.ours(record, cluster=cluster, lineage=lineage)
        and record.vast_id in (None, message.instance_id)
    )
    data = {
        "reason": message.reason,
        "phase": message.phase,
        "detail": message.detail,
        "boot_id": message.boot_id,
        "reported_at": message.at,
        "trusted": trusted,
    }
    text = f"instance {message.instance_id} ({message.phase}) reports {message.reason}"
    if message.detail:
        text += f": {message.detail}"
    if not trusted or record is None:
        note = dec.Note(
            LedgerKind.DETECTION,
            LEDGER_CLASS,
            f"{text} [refused: the token does not match the instance]",
            instance=message.instance_id,
            data={**data, "refused": "token_check_failed", "unproven": True},
        )
        refusal = dec.Refusal(403, "token_check_failed", "the token does not match the instance")
        return dec.Decision(records, (note,), (), refusal)
    if deliberate(record, message):
        kept = dec.Note(
            LedgerKind.NOTE,
            DELIBERATE_CLASS,
            f"instance {message.instance_id}: the stop was the head's own (intent stopped): "
            "the worker keeps its disk and lets the container stop",
            record=record.id,
            instance=message.instance_id,
            data={**data, "deliberate_stop": True},
        )
        stopped = replace(stop_heard(record, now), stopped_deliberately_at=now)
        return dec.Decision(dec.put(records, stopped), (kept,), (), None, True)
    note = dec.Note(
        LedgerKind.DETECTION,
        LEDGER_CLASS,
        text,
        record=record.id,
        instance=message.instance_id,
        data=data,
    )
    updated = records
    if record.live and record.intent is not Intent.DESTROYED:
        ended = dec.doomed(record, f"worker report: {message.reason}", now)
        # the breaker reads a worker's own failure report for short lives (planning/breaker.py)
        updated = dec.put(records, replace(ended, reported=message.reason))
    return dec.Decision(updated, (note,), (), None, False)
