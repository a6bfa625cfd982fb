"""Reports: the reason a container gives before it destroys its own instance (pure).

vast keeps no container log after a destroy, so this is the only record of why a worker ended:
every report goes to the ledger (and the head's log), trusted or not. A report is trusted when it
carries the join token of the instance that sends it (used or not: a worker's token stays known
while its record lives). A trusted report also ends the record here: intent destroyed, phase
destroying, so no net acts on a machine that is already destroying itself, and the planner's
finishing destroy confirms it with vast if the worker's own destroy never lands.
"""

from __future__ import annotations

from reconciler.head import decisions as dec
from reconciler.head import tokens
from reconciler.head.messages import Report
from reconciler.model.records import Intent, Records
from reconciler.state.ledger import LedgerKind

LEDGER_CLASS = "worker_report"


def report(
    records: Records, message: Report, *, cluster: str, lineage: str, now: float
) -> dec.Decision[None]:
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
        updated = dec.put(records, dec.doomed(record, f"worker report: {message.reason}", now))
    return dec.Decision(updated, (note,), ())
