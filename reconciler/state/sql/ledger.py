"""The ledger of a state in a database: the same lines as `ledger.jsonl`, in `rv_ledger`.

An entry is stamped as the file ledger stamps it (`ledger.stamp`: time, the next `seq` of the
workspace, secrets masked) and inserted in one transaction with the reading of that `seq`, so the
writers of one workspace on several machines number their lines without a gap or a repeat. Reading
parses the lines with the file ledger's own parser.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from reconciler.clock import Clock
from reconciler.state.ledger import (
    LedgerEntry,
    LedgerEvent,
    LedgerQuery,
    encode_line,
    parse_lines,
    stamp,
)
from reconciler.state.redact import normalise_secrets
from reconciler.state.sql.dialect import Connection
from reconciler.state.sql.link import Link


class SqlLedger:
    def __init__(self, link: Link, *, clock: Clock, secrets: Iterable[str] = ()) -> None:
        self.link = link
        self._clock = clock
        self._secrets = normalise_secrets(secrets)
        self._appending = threading.Lock()

    def append(self, event: LedgerEvent) -> LedgerEntry:
        (entry,) = self.append_all([event])
        return entry

    def append_all(self, events: Iterable[LedgerEvent]) -> list[LedgerEntry]:
        wanted = list(events)
        with self._appending:
            return self.link.run(lambda conn: self._insert(conn, wanted)) if wanted else []

    def _insert(self, conn: Connection, events: list[LedgerEvent]) -> list[LedgerEntry]:
        link = self.link
        with link.transaction(conn):
            if link.dialect.name == "postgresql":  # number the workspace's lines one at a time
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (link.workspace,))
            sql = "SELECT COALESCE(MAX(seq), 0) FROM rv_ledger WHERE workspace = ?"
            seq = int(link.q(conn, sql).fetchone()[0])
            entries = [
                stamp(event, seq + n, self._clock, self._secrets)
                for n, event in enumerate(events, start=1)
            ]
            for entry in entries:
                line = encode_line(entry).decode().rstrip("\n")
                link.q(
                    conn,
                    "INSERT INTO rv_ledger (workspace, seq, line) VALUES (?, ?, ?)",
                    link.workspace,
                    entry.seq,
                    line,
                )
        return entries

    def import_entries(self, entries: Iterable[LedgerEntry]) -> int:
        """Insert entries as they are (their time and seq kept) into this workspace's empty
        ledger: `state migrate`."""
        lines = [(e.seq, encode_line(e).decode().rstrip("\n")) for e in entries]

        def step(conn: Connection) -> int:
            link = self.link
            with link.transaction(conn):
                sql = "SELECT COUNT(*) FROM rv_ledger WHERE workspace = ?"
                if int(link.q(conn, sql).fetchone()[0]):
                    raise ValueError(f"{link.where}'s ledger is not empty")
                for seq, line in lines:
                    link.q(
                        conn,
                        "INSERT INTO rv_ledger (workspace, seq, line) VALUES (?, ?, ?)",
                        link.workspace,
                        seq,
                        line,
                    )
            return len(lines)

        return self.link.run(step)

    def entries(self, query: LedgerQuery | None = None) -> Iterator[LedgerEntry]:
        """The workspace's entries that match `query`, oldest first."""
        sql = "SELECT line FROM rv_ledger WHERE workspace = ? ORDER BY seq"
        rows = self.link.run(lambda conn: self.link.q(conn, sql).fetchall())
        yield from parse_lines((r[0].encode() for r in rows), self.link.where, query)

    def last_seq(self) -> int:
        """The workspace's newest entry's `seq` (0 with none)."""
        sql = "SELECT COALESCE(MAX(seq), 0) FROM rv_ledger WHERE workspace = ?"
        return int(self.link.run(lambda conn: self.link.q(conn, sql).fetchone())[0])

    def after(self, seq: int) -> list[LedgerEntry]:
        """The workspace's entries after `seq`, oldest first (what a reader has not seen)."""
        sql = "SELECT line FROM rv_ledger WHERE workspace = ? AND seq > ? ORDER BY seq"
        rows = self.link.run(
            lambda conn: self.link.q(conn, sql, self.link.workspace, seq).fetchall()
        )
        return list(parse_lines((r[0].encode() for r in rows), self.link.where))
