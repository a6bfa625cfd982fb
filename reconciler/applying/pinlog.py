"""The ledger line of a person's pin or unpin, once it is decided and saved.

Two places decide a pin: `ray-vast pin` under its own state lock (`handoff.pin`), and a
running `watch` taking the order from its mailbox (`watch/runner.py`). Both write the same line,
so it is written here, below both of them.
"""

from __future__ import annotations

from reconciler.applying.journal import Journal
from reconciler.planning.pins import PinOutcome
from reconciler.state.ledger import LedgerEvent, LedgerKind


def log_pin(journal: Journal, outcome: PinOutcome) -> None:
    record = outcome.record
    journal.ledger.append(
        LedgerEvent(
            record.cluster,
            LedgerKind.DECISION,
            outcome.cls,
            outcome.message,
            record=record.id,
            instance=record.vast_id,
            data=outcome.data,
        )
    )
