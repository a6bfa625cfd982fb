"""Where the executor's memory goes: the state store and the ledger, kept in step.

Intent is saved before every provider call and the outcome after it (DESIGN.md section 9), so
saving must be cheap to call and impossible to forget. `Journal.save` writes the records as the next
version of the snapshot it last wrote; `Journal.log` appends to the ledger. Both redact the secrets
they were given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.model.codec import decode, encode
from reconciler.model.records import Records
from reconciler.state.ledger import LedgerKind, LedgerWriter
from reconciler.state.snapshot import StateSnapshot
from reconciler.state.store import StateStore


def records_of(snapshot: StateSnapshot | None) -> Records:
    """The typed records of a snapshot (empty for a state that holds none yet)."""
    if snapshot is None or not snapshot.records:
        return Records()
    return decode(Records, dict(snapshot.records))


@dataclass
class Journal:
    store: StateStore
    ledger: LedgerWriter
    snapshot: StateSnapshot
    # The typed records of `snapshot`, decoded once per version rather than on every read.
    _decoded: tuple[int, Records] | None = None

    @property
    def lineage(self) -> str:
        return self.snapshot.lineage

    @property
    def serial(self) -> int:
        return self.snapshot.serial

    def records(self) -> Records:
        key = id(self.snapshot)
        if self._decoded is None or self._decoded[0] != key:
            self._decoded = (key, records_of(self.snapshot))
        return self._decoded[1]

    def save(self, records: Records) -> None:
        """Write `records` as the next state version; nothing is written when nothing changed."""
        if records == self.records():
            return
        self.snapshot = self.store.write(encode(records), based_on=self.snapshot)
        self._decoded = (id(self.snapshot), records)

    def log(
        self,
        cluster: str,
        kind: LedgerKind,
        cls: str,
        message: str,
        *,
        record: str | None = None,
        instance: int | None = None,
        dph: float | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> None:
        self.ledger.log(
            cluster, kind, cls, message, record=record, instance=instance, dph=dph, data=data
        )
