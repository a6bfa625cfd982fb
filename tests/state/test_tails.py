"""The ledger's new entries (state/tails.py), a file's and a database's: what was written before
the tail was made is not new, what is written after comes once, in order. Before, a watch on a
database state counted no orphan's dollars (its counter read only `ledger.jsonl`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reconciler.clock import FakeClock
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.ledger import SqlLedger
from reconciler.state.sql.link import Link
from reconciler.state.tails import FileTail, LedgerTail, SqlTail
from tests.pgserver import PgServer

Append = Callable[[str], None]
Ledger = tuple[Append, Callable[[], LedgerTail]]


@pytest.fixture(params=["file", "sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def ledger(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Append, Callable[[], LedgerTail]]]:
    clock = FakeClock()
    if request.param == "file":
        path = tmp_path / "ledger.jsonl"
        with LedgerWriter.open(path, clock=clock) as writer:
            yield (lambda m: _append(writer, m)), (lambda: FileTail(path))
        return
    if request.param == "sqlite":
        link = Link(Sqlite(tmp_path / "state.db"), "default")
    else:
        server: PgServer = request.getfixturevalue("pg_server")
        link = Link(Postgres(server.url(), "postgresql://test"), f"tails{id(tmp_path)}")
    sql = SqlLedger(link, clock=clock)
    yield (lambda m: _append(sql, m)), (lambda: SqlTail(sql))
    link.drop()


def _append(writer: LedgerWriter | SqlLedger, message: str) -> None:
    writer.append(LedgerEvent("c1", LedgerKind.NOTE, "test", message))


def test_a_tail_gives_what_was_written_after_it_once_in_order(
    ledger: Ledger,
) -> None:
    append, make = ledger
    append("before")
    tail = make()
    assert tail.new() == []
    append("one")
    append("two")
    assert [e.message for e in tail.new()] == ["one", "two"]
    assert tail.new() == []
    append("three")
    assert [e.message for e in tail.new()] == ["three"]
