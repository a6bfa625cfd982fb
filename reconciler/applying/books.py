"""The records' one name, `RecordsStore`, and what the executor keeps: `Books`.

`Journal` is the real one of both (the state store and the ledger). `HostBooks` serves a head run
without a watch controller (and the head's tests): the head's `RecordsStore` for the records, a
`LedgerSink` for the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.applying.journal import RecordsLock
from reconciler.model.records import Records
from reconciler.state.ledger import LedgerSink


class RecordsStore(Protocol):
    """The records behind one lock, the one name they go by (issue 22): the watch controller's
    `Journal`, or the head's `SharedRecords` when it runs alone. `update` changes and saves them
    in one hold of the lock."""

    @property
    def lock(self) -> RecordsLock: ...

    def records(self) -> Records: ...

    def update(self, change: Callable[[Records], Records]) -> Records: ...

    def keep(self, records: Records, now: float) -> None:
        """`records`, which differ from the current ones only in a worker's clocks: current at
        once, written with the next save or within `settings.KEPT_CLOCKS_SECONDS` of `now`'s
        clock (or at once, by a store that keeps nothing unwritten)."""
        ...


class Books(RecordsStore, Protocol):
    """What the executor keeps: a `RecordsStore`, the state's lineage, and the ledger (one verb:
    `books.ledger.append(LedgerEvent(...))`)."""

    @property
    def ledger(self) -> LedgerSink: ...

    @property
    def lineage(self) -> str: ...

    def save(self, records: Records) -> None: ...

    def check_lease(self) -> None:
        """`LockLostError` unless the state's lock is still this process's."""
        ...


@dataclass
class HostBooks:
    host: RecordsStore
    ledger: LedgerSink
    lineage: str

    @property
    def lock(self) -> RecordsLock:
        return self.host.lock

    def records(self) -> Records:
        return self.host.records()

    def save(self, records: Records) -> None:
        self.host.update(lambda _records: records)

    def update(self, change: Callable[[Records], Records]) -> Records:
        return self.host.update(change)

    def keep(self, records: Records, now: float) -> None:
        self.host.keep(records, now)

    def check_lease(self) -> None:
        """A head alone holds no state lock of its own: whoever hosts its records does."""
        return None
