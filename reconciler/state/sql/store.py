"""A `StateStore` in SQLite or PostgreSQL (DESIGN.md 11, "State is shared").

Many states (workspaces) share one database. The lock is a lease (`lease.py`); reads take no lock
and see one consistent snapshot (one row). Every write is one compare-and-swap inside one
transaction: the state row moves from the lineage and serial it was read at only while the
writer's lease (its id and its fencing token) is in force by the database's clock, so a holder
that lost its lease (frozen, cut off, force-unlocked) cannot write late. The versions before are
kept in `rv_history`. A write retried after a broken connection whose first attempt had in fact
committed is recognised (the state is exactly what it wrote), not refused as stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from reconciler import __version__
from reconciler.clock import Clock
from reconciler.state.errors import SerialMismatchError, StateConflictError
from reconciler.state.jsonvalue import canonical
from reconciler.state.lock import Identity, LockHolder
from reconciler.state.lockinfo import LockInfo
from reconciler.state.redact import normalise_secrets
from reconciler.state.snapshot import Records, StateSnapshot, decode, encode
from reconciler.state.sql import schema
from reconciler.state.sql.dialect import Connection, Dialect
from reconciler.state.sql.lease import LEASE_SECONDS, Lease
from reconciler.state.sql.link import Link
from reconciler.state.store import check_basis, next_snapshot, prepare_records, refuse_push

DEFAULT_WORKSPACE = "default"


class SqlStore:
    """The state of one workspace in one database."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        clock: Clock,
        workspace: str = DEFAULT_WORKSPACE,
        secrets: Iterable[str] = (),
        tool_version: str = __version__,
        identity: Identity | None = None,
        lease_seconds: float = LEASE_SECONDS,
        ci_url: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.link = Link(dialect, workspace)
        self.where = self.link.where
        self.lease = Lease(
            self.link,
            clock=clock,
            identity=identity,
            tool_version=tool_version,
            seconds=lease_seconds,
            ci_url=ci_url,
            monotonic=monotonic,
        )
        self._secrets = normalise_secrets(secrets)
        self._tool_version = tool_version

    # -- the lock: the lease's --

    @property
    def held(self) -> LockInfo | None:
        return self.lease.held

    @property
    def taken_over(self) -> LockInfo | None:
        return self.lease.taken_over

    def lock(self, operation: str, *, timeout_seconds: float = 0.0) -> LockInfo:
        return self.lease.take(operation, timeout_seconds=timeout_seconds)

    def unlock(self) -> None:
        self.lease.give_back()

    def force_unlock(self, lock_id: str) -> LockHolder:
        return self.lease.force(lock_id)

    def lock_holder(self) -> LockHolder | None:
        return self.lease.holder()

    def check_lease(self) -> None:
        """Refuse to go on (`LockLostError`) once the lease may no longer be ours: by this
        machine's deadline, then by the database's word (one read: a force-unlock or a takeover
        stops the holder before its next call to vast, not at its next renewal)."""
        self.lease.check()
        self.link.run(self.lease.check_in)

    def close(self) -> None:
        """Give the lease back if it is held, and close the connection."""
        try:
            if self.lease.held is not None:
                self.lease.give_back()
        finally:
            with self.link.mutex:
                self.link.drop()

    # -- reading --

    def read(self) -> StateSnapshot | None:
        sql = "SELECT data FROM rv_states WHERE workspace = ?"
        row = self.link.run(lambda conn: self.link.q(conn, sql).fetchone())
        return None if row is None else decode(row[0].encode(), self.where)

    def history(self) -> list[StateSnapshot]:
        """The versions kept before the current one, newest first."""
        sql = "SELECT data FROM rv_history WHERE workspace = ? ORDER BY serial DESC"
        rows = self.link.run(lambda conn: self.link.q(conn, sql).fetchall())
        return [decode(r[0].encode(), self.where) for r in rows][1:]

    # -- writing --

    def write(self, records: Records, *, based_on: StateSnapshot | None) -> StateSnapshot:
        self.lease.check()  # writing needs the lease, still ours
        prepared = prepare_records(records, self._secrets)
        tries = 0

        def step(conn: Connection) -> StateSnapshot:
            nonlocal tries
            tries += 1
            self.lease.check()
            with self.link.transaction(conn):
                return self._write_in(conn, prepared, based_on, retried=tries > 1)

        return self.link.run(step)

    def push(self, snapshot: StateSnapshot) -> StateSnapshot:
        self.lease.check()
        data = encode(snapshot, indent=None).decode()

        def step(conn: Connection) -> StateSnapshot:
            with self.link.transaction(conn):
                sql = "SELECT data FROM rv_states WHERE workspace = ?"
                row = self.link.q(conn, sql + self.link.dialect.for_update).fetchone()
                refuse_push(
                    None if row is None else decode(row[0].encode(), self.where), self.where
                )
                self.lease.check_in(conn, lock=True)
                self._insert(conn, snapshot, data)
                self._keep(conn, snapshot, data)
            return decode(data.encode(), self.where)

        return self.link.run(step)

    def _write_in(
        self, conn: Connection, records: Records, based_on: StateSnapshot | None, *, retried: bool
    ) -> StateSnapshot:
        sql = "SELECT data FROM rv_states WHERE workspace = ?"
        sql += self.link.dialect.for_update
        row = self.link.q(conn, sql).fetchone()
        current = None if row is None else decode(row[0].encode(), self.where)
        self.lease.check_in(conn, lock=True)
        if retried and _landed(current, based_on, records):
            assert current is not None
            return current  # the earlier attempt committed; its answer was lost
        check_basis(current, based_on, self.where)
        snapshot = next_snapshot(current, records, tool_version=self._tool_version)
        if snapshot is None:
            assert current is not None
            return current
        data = encode(snapshot, indent=None).decode()
        if current is None:
            self._insert(conn, snapshot, data)
        else:
            self._swap(conn, current, snapshot, data)
        self._keep(conn, snapshot, data)
        return decode(data.encode(), self.where)

    def _insert(self, conn: Connection, snapshot: StateSnapshot, data: str) -> None:
        held = self.lease.held
        assert held is not None
        done = self.link.q(
            conn,
            "INSERT INTO rv_states (workspace, lineage, serial, data, written_at, written_by,"
            " fencing) VALUES (?, ?, ?, ?, {now}, ?, ?) ON CONFLICT (workspace) DO NOTHING",
            self.link.workspace,
            snapshot.lineage,
            snapshot.serial,
            data,
            held.who,
            held.fencing,
        )
        if done.rowcount != 1:
            raise StateConflictError(f"{self.where}: a state appeared while this one was made")

    def _swap(
        self, conn: Connection, current: StateSnapshot, snapshot: StateSnapshot, data: str
    ) -> None:
        """The compare-and-swap: lineage, serial, and the writer's lease in force."""
        held = self.lease.held
        assert held is not None
        done = self.link.q(
            conn,
            "UPDATE rv_states SET data = ?, serial = ?, written_at = {now}, written_by = ?,"
            " fencing = ? WHERE workspace = ? AND lineage = ? AND serial = ? AND EXISTS"
            " (SELECT 1 FROM rv_locks l WHERE l.workspace = rv_states.workspace AND"
            " l.lock_id = ? AND l.fencing = ? AND l.expires > {now})",
            data,
            snapshot.serial,
            held.who,
            held.fencing,
            self.link.workspace,
            current.lineage,
            current.serial,
            held.id,
            held.fencing,
        )
        if done.rowcount != 1:
            raise SerialMismatchError(f"{self.where} changed under this write")

    def _keep(self, conn: Connection, snapshot: StateSnapshot, data: str) -> None:
        ws = self.link.workspace
        self.link.q(
            conn,
            "INSERT INTO rv_history (workspace, serial, lineage, data, written_at)"
            " VALUES (?, ?, ?, ?, {now})",
            ws,
            snapshot.serial,
            snapshot.lineage,
            data,
        )
        oldest = snapshot.serial - schema.HISTORY_KEPT
        self.link.q(conn, "DELETE FROM rv_history WHERE workspace = ? AND serial <= ?", ws, oldest)


def _landed(
    current: StateSnapshot | None, based_on: StateSnapshot | None, records: Records
) -> bool:
    """Whether `current` is exactly the write being retried (its first attempt committed)."""
    if current is None or based_on is None:
        return False
    return (
        current.lineage == based_on.lineage
        and current.serial == based_on.serial + 1
        and canonical(current.records) == canonical(records)
    )
