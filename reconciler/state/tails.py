"""The ledger's entries written since a reader last looked: a file's by offset, a database's by
`seq`. `watch`'s dollar counters read the orphans' bills from them on every tick, so a state in
a database counts its orphans as a state of files does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from reconciler.state.ledger import LedgerEntry
from reconciler.state.sql.ledger import SqlLedger


class LedgerTail(Protocol):
    def new(self) -> list[LedgerEntry]:
        """The entries written since the last call (since the tail was made, the first time)."""
        ...


class FileTail:
    """`ledger.jsonl`'s whole lines past the offset last read (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = path.stat().st_size if path.exists() else 0

    def new(self) -> list[LedgerEntry]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self._offset)
            chunk = handle.read()
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(whole)
        entries = []
        for line in whole.splitlines():
            try:
                entries.append(LedgerEntry.from_json(json.loads(line)))
            except (UnicodeDecodeError, ValueError):
                continue  # a torn line: `ray-vast ledger` says so; the reader goes on
        return entries


class SqlTail:
    """`rv_ledger`'s entries of the workspace past the `seq` last read."""

    def __init__(self, ledger: SqlLedger) -> None:
        self.ledger = ledger
        self._seq = ledger.last_seq()

    def new(self) -> list[LedgerEntry]:
        entries = self.ledger.after(self._seq)
        if entries:
            self._seq = max(e.seq for e in entries)
        return entries
