"""Reviewed plans in a database (`rv_plans`): one row per workspace and spec tree."""

from __future__ import annotations

from reconciler.state.reviewed import Reviewed
from reconciler.state.sql.dialect import Connection
from reconciler.state.sql.link import Link


class SqlReviewedPlans:
    def __init__(self, link: Link) -> None:
        self.link = link

    def put(self, reviewed: Reviewed) -> None:
        def step(conn: Connection) -> None:
            self.link.q(
                conn,
                "INSERT INTO rv_plans (workspace, spec_tree, head_sha, status, created_at,"
                " created_by, body, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (workspace, spec_tree) DO UPDATE SET head_sha = excluded.head_sha,"
                " status = excluded.status, created_at = excluded.created_at,"
                " created_by = excluded.created_by, body = excluded.body,"
                " outcome = excluded.outcome",
                self.link.workspace,
                reviewed.tree,
                reviewed.commit,
                reviewed.status,
                reviewed.created_at,
                reviewed.created_by,
                reviewed.plan.decode(),
                reviewed.outcome,
            )

        self.link.run(step)

    def get(self, tree: str) -> Reviewed | None:
        sql = (
            "SELECT head_sha, status, created_at, created_by, body, outcome FROM rv_plans"
            " WHERE workspace = ? AND spec_tree = ?"
        )
        row = self.link.run(
            lambda conn: self.link.q(conn, sql, self.link.workspace, tree).fetchone()
        )
        if row is None:
            return None
        commit, status, at, by, body, outcome = row
        return Reviewed(tree, commit, status, float(at), by, body.encode(), outcome)

    def mark(self, tree: str, status: str, outcome: str, *, only_from: str | None = None) -> None:
        sql = "UPDATE rv_plans SET status = ?, outcome = ? WHERE workspace = ? AND spec_tree = ?"
        params: tuple[str, ...] = (status, outcome, self.link.workspace, tree)
        if only_from is not None:
            sql, params = sql + " AND status = ?", (*params, only_from)
        self.link.run(lambda conn: self.link.q(conn, sql, *params))
