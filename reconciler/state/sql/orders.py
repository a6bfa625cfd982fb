"""The orders mailbox of a state in a database (`rv_orders`): any machine leaves, watch takes.

In PostgreSQL, leaving an order rings `rv_orders` and answering it rings `rv_answers` (NOTIFY,
at the commit; the payload is the workspace and the order's id), so the controller and the
command waiting for the answer wake at once (`bell`); in SQLite they look again after a while.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from reconciler.state.orders import Answer, Order
from reconciler.state.sql.dialect import Bell, Connection
from reconciler.state.sql.link import Link

ORDERS_CHANNEL, ANSWERS_CHANNEL = "rv_orders", "rv_answers"


class Ring:
    """A bell and which of its notifications are ours."""

    def __init__(self, bell: Bell, ours: Callable[[str], bool]) -> None:
        self._bell, self._ours = bell, ours

    def wait(self, seconds: float) -> bool:
        """Up to `seconds`; True when ours rang."""
        return self._bell.wait(seconds, self._ours)

    def close(self) -> None:
        self._bell.close()


class SqlOrders:
    def __init__(self, link: Link) -> None:
        self.link = link

    def leave(self, order: Order) -> None:
        def step(conn: Connection) -> None:
            with self.link.transaction(conn):
                self.link.q(
                    conn,
                    "INSERT INTO rv_orders (id, workspace, kind, body, at, by_whom, state, code,"
                    " message) VALUES (?, ?, ?, ?, ?, ?, 'waiting', NULL, NULL)",
                    order.id,
                    self.link.workspace,
                    order.kind,
                    json.dumps(order.body),
                    order.at,
                    order.by,
                )
                self._ring(conn, ORDERS_CHANNEL, order.id)

        self.link.run(step)

    def bell(self, answer_of: str | None = None) -> Ring | None:
        """What rings when an order is left in this workspace (`answer_of`: when that order is
        answered); the caller closes it. None for SQLite."""
        heard = self.link.dialect.listen(ANSWERS_CHANNEL if answer_of else ORDERS_CHANNEL)
        if heard is None:
            return None
        prefix = f"{self.link.workspace}\t"
        return Ring(
            heard,
            lambda payload: (
                payload == prefix + answer_of if answer_of else payload.startswith(prefix)
            ),
        )

    def _ring(self, conn: Connection, channel: str, order_id: str) -> None:
        self.link.dialect.notify(conn, channel, f"{self.link.workspace}\t{order_id}")

    def waiting(self) -> list[Order | str]:
        sql = (
            "SELECT id, kind, body, at, by_whom FROM rv_orders WHERE workspace = ? AND"
            " state = 'waiting' ORDER BY at, id"
        )
        rows = self.link.run(lambda conn: self.link.q(conn, sql).fetchall())
        found: list[Order | str] = []
        for ident, kind, body, at, by in rows:
            try:
                found.append(Order(ident, kind, dict(json.loads(body)), float(at), by))
            except (ValueError, TypeError):
                found.append(ident)
        return found

    def answer(self, order_id: str, answer: Answer) -> None:
        sql = (
            "UPDATE rv_orders SET state = 'answered', code = ?, message = ? WHERE workspace = ?"
            " AND id = ? AND state = 'waiting'"
        )
        params = (answer.code, answer.message, self.link.workspace, order_id)

        def step(conn: Connection) -> None:
            with self.link.transaction(conn):
                self.link.q(conn, sql, *params)
                self._ring(conn, ANSWERS_CHANNEL, order_id)

        self.link.run(step)

    def answer_of(self, order_id: str) -> Answer | None:
        sql = "SELECT state, code, message FROM rv_orders WHERE workspace = ? AND id = ?"
        row = self.link.run(
            lambda conn: self.link.q(conn, sql, self.link.workspace, order_id).fetchone()
        )
        if row is None or row[0] != "answered":
            return None
        return Answer(int(row[1]), str(row[2]))

    def withdraw(self, order_id: str) -> bool:
        def step(conn: Connection) -> bool:
            sql = (
                "UPDATE rv_orders SET state = 'withdrawn' WHERE workspace = ? AND id = ? AND"
                " state = 'waiting'"
            )
            return bool(self.link.q(conn, sql, self.link.workspace, order_id).rowcount)

        return self.link.run(step)
