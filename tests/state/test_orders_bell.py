"""The orders' bell (issue 23: "PostgreSQL LISTEN/NOTIFY, polling on SQLite"): leaving an order
rings the controller's wait, and answering it rings the command waiting for that answer, so
neither waits for its next look; a workspace hears only its own, and a bell whose connection
the server ended hears again at its next wait. SQLite has no bell: its waiters poll."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.state.orders import APPLY, Answer, Order
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.link import Link
from reconciler.state.sql.orders import SqlOrders
from tests.pgserver import PgServer

pytestmark = pytest.mark.slow  # a real PostgreSQL server


@pytest.fixture
def database(pg_server: PgServer) -> str:
    name = "bell_" + uuid.uuid4().hex[:10]
    return pg_server.new_database(name)


@pytest.fixture
def mailboxes(database: str) -> Iterator[tuple[SqlOrders, SqlOrders, SqlOrders]]:
    """Two machines on one workspace, and one on another workspace of the same database."""
    dialect = Postgres(database, "postgresql://test")
    links = [Link(dialect, "team"), Link(dialect, "team"), Link(dialect, "other")]
    yield tuple(SqlOrders(link) for link in links)  # type: ignore[misc]
    for link in links:
        link.drop()


def _order(n: int) -> Order:
    return Order.new(APPLY, {"n": n}, at=1000.0 + n, by="ci@runner")


def test_an_order_left_rings_the_controllers_wait_and_another_workspaces_does_not(
    mailboxes: tuple[SqlOrders, SqlOrders, SqlOrders],
) -> None:
    controller, command, other = mailboxes
    ring = controller.bell()
    assert ring is not None
    try:
        other.leave(_order(1))
        assert not ring.wait(0.5), "another workspace's order rang ours"
        command.leave(_order(2))
        assert ring.wait(30), "the order left did not ring (the wait ran out)"
    finally:
        ring.close()


def test_the_answer_rings_the_one_waiting_for_it(
    mailboxes: tuple[SqlOrders, SqlOrders, SqlOrders],
) -> None:
    controller, command, _ = mailboxes
    mine, theirs = _order(1), _order(2)
    for order in (mine, theirs):
        command.leave(order)
    ring = command.bell(answer_of=mine.id)
    assert ring is not None
    try:
        controller.answer(theirs.id, Answer(0, "done"))
        assert not ring.wait(0.5), "another order's answer rang"
        controller.answer(mine.id, Answer(0, "done"))
        assert ring.wait(30)
        assert command.answer_of(mine.id) == Answer(0, "done")
    finally:
        ring.close()


def test_a_bell_whose_session_was_ended_hears_again(
    mailboxes: tuple[SqlOrders, SqlOrders, SqlOrders], pg_server: PgServer, database: str
) -> None:
    controller, command, _ = mailboxes
    ring = controller.bell()
    assert ring is not None
    try:
        assert not ring.wait(0.1)  # listening now
        pg_server.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'",
            database.rsplit("/", 1)[1],
        )
        command.leave(_order(1))
        assert not ring.wait(0.5), "a bell with no session cannot hear; it says so"
        assert not ring.wait(0.1)  # listening again on a new session
        command.leave(_order(2))
        assert ring.wait(30)
    finally:
        ring.close()


def test_sqlite_has_no_bell(tmp_path: Path) -> None:
    mailbox = SqlOrders(Link(Sqlite(tmp_path / "state.db"), "default"))
    assert mailbox.bell() is None
    assert mailbox.bell(answer_of="x") is None
