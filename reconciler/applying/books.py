"""What the executor keeps its records and ledger in: the shape `Journal` has.

`Journal` is the real one (the state store and the ledger). `HostBooks` serves a head run without
a watch controller (and the head's tests): the head's `RecordsHost` for the records, a
`LedgerSink` for the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.applying.journal import RecordsLock
from reconciler.model.records import Records
from reconciler.state.ledger import LedgerSink


class Books(Protocol):
    """Where the executor's memory goes: the records behind their lock, and the ledger (one
    verb: `books.ledger.append(LedgerEvent(...))`)."""

    @property
    def ledger(self) -> LedgerSink: ...

    @property
    def lock(self) -> RecordsLock: ...

    @property
    def lineage(self) -> str: ...

    def records(self) -> Records: ...

    def save(self, records: Records) -> None: ...

    def update(self, change: Callable[[Records], Records]) -> Records: ...


class RecordsHost(Protocol):
    """Records behind one lock: the watch controller's `Journal`, or the head's
    `SharedRecords` when it runs alone. `update` changes and saves them in one hold."""

    @property
    def lock(self) -> RecordsLock: ...

    def records(self) -> Records: ...

    def update(self, change: Callable[[Records], Records]) -> Records: ...


@dataclass
class HostBooks:
    host: RecordsHost
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
