"""What the loop forgets: records of machines ended long ago, and of clusters no longer declared.

Records of machines ended a day ago leave the state (`planning/retention.py`: every save writes the
whole state, so a state that keeps every record grows slower to save with every rental); the bill
of each goes to the ledger first, so `ray-vast cost` still prices it. A cluster no spec declares
any more is pruned on the reconcile cadence while it has live machines of ours.
"""

from __future__ import annotations

from collections.abc import Container

from reconciler.applying.journal import Journal
from reconciler.model import cost
from reconciler.model.records import Records
from reconciler.planning import retention
from reconciler.state.ledger import LedgerEvent, LedgerKind


def forget_ended(journal: Journal, now: float) -> None:
    """Drop the records retention no longer keeps, their bills ledgered first, in one hold."""
    with journal.lock:
        before = journal.records()
        after = retention.prune(before, now)
        if after is before:
            return
        for bill in retention.bills(before, after):
            record = bill.record
            journal.ledger.append(
                LedgerEvent(
                    *(record.cluster, LedgerKind.REPORT, cost.BILL_CLASS, bill.message),
                    record=record.id,
                    instance=record.vast_id,
                    data=bill.entry,
                )
            )
        journal.save(after)


def undeclared_live(records: Records, lineage: str, declared: Container[str]) -> bool:
    """Whether a live machine of ours belongs to a cluster no spec declares any more."""
    return any(
        r.live and r.managed_by == lineage and r.cluster not in declared
        for r in records.instances.values()
    )
