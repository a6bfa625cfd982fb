"""The records the head shares with the watch controller, behind one lock.

The head's handlers run in their own threads and change the same records the nets and the
executor do. Both sides go through a `RecordsStore`: one re-entrant lock, the current records, and
`update` to change and save them in one hold. Under `watch` the host is the controller's
`Journal` (applying/journal.py); `SharedRecords` is the standalone one, for a head run without a
controller and for tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from reconciler.applying.books import RecordsStore
from reconciler.applying.journal import RecordsLock
from reconciler.model.plan import Action
from reconciler.model.records import Records
from reconciler.state.ledger import LedgerSink

__all__ = ["LedgerSink", "RecordsStore", "SharedRecords", "Submits"]


class SharedRecords:
    """Records in memory, saved through `save` (e.g. `Journal.save`) on every change."""

    def __init__(self, records: Records, *, save: Callable[[Records], None]) -> None:
        self._records = records
        self._save = save
        self._lock = RecordsLock()

    @property
    def lock(self) -> RecordsLock:
        return self._lock

    def records(self) -> Records:
        with self._lock:
            return self._records

    def update(self, change: Callable[[Records], Records]) -> Records:
        with self._lock:
            updated = change(self._records)
            if updated is not self._records:
                self._save(updated)
                self._records = updated
            return updated

    def keep(self, records: Records, now: float) -> None:
        """Saved at once: a head alone writes through whatever `save` it was given."""
        self.update(lambda _records: records)


class Submits(Protocol):
    """Where the head hands its destroys: the one applier (`reconciler.applying.applier`)."""

    def submit(self, actions: Sequence[Action]) -> None: ...
