"""The orders mailbox of a state in a database (`rv_orders`): any machine leaves, watch takes."""

from __future__ import annotations

import json

from reconciler.state.orders import Answer, Order
from reconciler.state.sql.dialect import Connection
from reconciler.state.sql.link import Link


class SqlOrders:
    def __init__(self, link: Link) -> None:
        self.link = link

    def leave(self, order: Order) -> None:
        self.link.run(
            lambda conn: self.link.q(
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
        )

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
        self.link.run(lambda conn: self.link.q(conn, sql, *params))

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
