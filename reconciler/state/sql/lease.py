"""The state lock of a database backend: a lease, renewed by its holder, fenced by a token.

The lease is a row in `rv_locks`: who holds it (user@host, pid, operation, version, CI run), its
fencing token (one more than any before it in this workspace: it only grows), and when it expires
by the database's clock. The holder renews it every third of its length from a thread of its own,
and keeps a deadline on this machine's monotonic clock: when it sent the last renewal that
succeeded, plus the lease, less a margin. Past that deadline it fences itself: `check` (the
executor asks before every call to vast) raises `LockLostError`, because vast cannot check a
fencing token and the database may have given the lease to someone else by then.

A lease is taken over only from a holder proven gone: lapsed by the database's clock and, on
PostgreSQL, its session gone (its advisory lock free). Refusals name the holder as the database
has it, with the time its lease has left. After a reconnect the holder proves the lease is still
its own (id and token, not lapsed) before anything else, or it is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable

from reconciler import __version__
from reconciler.clock import Clock
from reconciler.state.errors import (
    Liveness,
    LockLostError,
    LockNotHeldError,
    StateError,
    StateLockedError,
    UnlockRefusedError,
)
from reconciler.state.lock import Identity, LockHolder, wait_for_lock
from reconciler.state.lockinfo import LockInfo
from reconciler.state.sql.dialect import Connection
from reconciler.state.sql.keeper import Keeper
from reconciler.state.sql.link import Link
from reconciler.state.store import new_lock_info

LEASE_SECONDS = 60.0
# How long a locker waits for a releasing holder's beacon, and how often it asks.
RELEASE_WAIT_SECONDS = 1.0
RELEASE_POLL_SECONDS = 0.02
_log = logging.getLogger(__name__)
Row = tuple[LockInfo, float, int | None]  # the holder, its lease's time left, its session


class Lease:
    def __init__(
        self,
        link: Link,
        *,
        clock: Clock,
        identity: Identity | None,
        tool_version: str = __version__,
        seconds: float = LEASE_SECONDS,
        ci_url: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.link = link
        self.seconds = seconds
        self.held: LockInfo | None = None
        self.taken_over: LockInfo | None = None
        self._clock = clock
        self._identity = identity
        self._tool_version = tool_version
        self._ci_url = ci_url
        self._monotonic = monotonic
        self._valid_until = 0.0
        self._lost: str | None = None
        self._keeper: Keeper | None = None
        link.on_reconnect = self._reclaim
        link.still_ok = self._still_ok

    # -- taking and giving back --

    def take(self, operation: str, *, timeout_seconds: float) -> LockInfo:
        if self.held is not None:
            raise StateError(f"this store already holds the state lock {self.held.id}")
        info = wait_for_lock(
            lambda: self.link.run(lambda conn: self._try(conn, operation)),
            clock=self._clock,
            timeout_seconds=timeout_seconds,
        )
        self._keeper = Keeper(self)
        self._keeper.start()
        return info

    def _try(self, conn: Connection, operation: str) -> LockInfo | StateLockedError:
        link, sent = self.link, self._monotonic()
        link.q(
            conn,
            "INSERT INTO rv_fencing (workspace, token) VALUES (?, 0)"
            " ON CONFLICT (workspace) DO NOTHING",
        )
        with link.transaction(conn):
            fencing = "SELECT token FROM rv_fencing WHERE workspace = ?"
            fencing += link.dialect.for_update
            token = int(link.q(conn, fencing).fetchone()[0])
            row = self.row(conn, lock=True)
            refused = self._refusal(conn, row) if row is not None else None
            if refused is not None:
                return refused
            if not self._beacon_within(conn, RELEASE_WAIT_SECONDS):  # a holder mid-release
                return StateLockedError(
                    _releasing(link.where), liveness=Liveness.ALIVE, lock_path=link.where
                )
            info = self._info(operation, token + 1)
            self._insert(conn, info)
        self._taken(info, row[0] if row is not None else None, sent)
        return info

    def _insert(self, conn: Connection, info: LockInfo) -> None:
        link = self.link
        link.q(
            conn,
            "UPDATE rv_fencing SET token = ? WHERE workspace = ?",
            info.fencing,
            link.workspace,
        )
        link.q(conn, "DELETE FROM rv_locks WHERE workspace = ?")
        link.q(
            conn,
            "INSERT INTO rv_locks (workspace, lock_id, fencing, info, expires, session)"
            " VALUES (?, ?, ?, ?, {now} + ?, ?)",
            link.workspace,
            info.id,
            info.fencing,
            json.dumps(info.to_json()),
            self.seconds,
            link.dialect.session(conn),
        )

    def _taken(self, info: LockInfo, dead: LockInfo | None, sent: float) -> None:
        self.held, self._lost, self.taken_over = info, None, dead
        self._valid_until = sent + self._usable()
        if dead is not None:
            _log.warning(
                "Took over the state lease of %s: its holder `%s` (pid %d on %s) is gone and its"
                " lease lapsed. Going on from the last saved state.",
                self.link.where,
                dead.operation,
                dead.pid,
                dead.host,
            )

    def _refusal(self, conn: Connection, row: Row) -> StateLockedError | None:
        """Why the holder's lease stands (None: it is proven gone, and ours to take)."""
        info, left, _session = row
        liveness = self._liveness(conn, left)
        if liveness is Liveness.DEAD:
            return None
        where = self.link.where
        return StateLockedError(info, liveness=liveness, lock_path=where, lease_left=left)

    def _liveness(self, conn: Connection, left: float) -> Liveness:
        free = self.link.dialect.beacon_free(conn, self.link.workspace)
        if left > 0:
            return Liveness.LAPSING if free else Liveness.ALIVE
        return Liveness.STUCK if free is False else Liveness.DEAD

    def row(self, conn: Connection, *, lock: bool = False) -> Row | None:
        link = self.link
        sql = "SELECT info, expires - {now}, session FROM rv_locks WHERE workspace = ?"
        found = link.q(conn, sql + (link.dialect.for_update if lock else "")).fetchone()
        if found is None:
            return None
        session = int(found[2]) if found[2] is not None else None
        return LockInfo.from_json(json.loads(found[0])), float(found[1]), session

    def _info(self, operation: str, fencing: int) -> LockInfo:
        if self._identity is None:
            self._identity = Identity.current()
        info = new_lock_info(
            operation=operation,
            identity=self._identity,
            clock=self._clock,
            tool_version=self._tool_version,
            path=self.link.where,
        )
        return LockInfo(**{**info.to_json(), "fencing": fencing, "ci_url": self._ci_url})

    def give_back(self) -> None:
        held = self.held
        if held is None:
            raise LockNotHeldError(f"{self.link.where}: this store does not hold the state lock")
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.stop()

        def step(conn: Connection) -> int:
            done = self.link.q(
                conn,
                "DELETE FROM rv_locks WHERE workspace = ? AND lock_id = ? AND fencing = ?",
                self.link.workspace,
                held.id,
                held.fencing,
            )
            self.link.dialect.drop_beacon(conn, self.link.workspace)
            return int(done.rowcount)

        try:
            removed = self.link.run(step)
        finally:
            self.held = None
        if removed != 1:
            self._lost = self._lost or "it was removed (force-unlock) or taken over"
            raise LockLostError(self._lost_message(held))
        self._lost = None

    # -- keeping it --

    def _usable(self) -> float:
        """How long a renewal keeps the lease ours by our own clock: the lease, less a margin
        for the database's clock running ahead of ours and for the call in flight."""
        return self.seconds - max(0.5, self.seconds / 6)

    def renew(self) -> None:
        """Extend the lease by its length from now (the keeper thread's work)."""
        held = self.held
        if held is None:
            return

        def step(conn: Connection) -> None:
            sent = self._monotonic()
            done = self.link.q(
                conn,
                "UPDATE rv_locks SET expires = {now} + ? WHERE workspace = ? AND lock_id = ?"
                " AND fencing = ? AND expires > {now}",
                self.seconds,
                self.link.workspace,
                held.id,
                held.fencing,
            )
            if done.rowcount != 1:
                self.lose("the lease could not be renewed: it lapsed, or was taken")
            else:
                self._valid_until = max(self._valid_until, sent + self._usable())

        self.link.run(step)

    def check(self) -> None:
        """Refuse to go on once the lease may no longer be ours."""
        held = self.held
        if held is None:
            raise LockNotHeldError(f"{self.link.where}: this store does not hold the state lock")
        if self._lost is None and self._monotonic() >= self._valid_until:
            self.lose("it was not renewed in time (this process was frozen or cut off)")
        if self._lost is not None:
            raise LockLostError(self._lost_message(held))

    def check_in(self, conn: Connection, *, lock: bool = False) -> None:
        """The database's word on our lease (inside a write's transaction: `lock` its row)."""
        held = self.held
        if held is None:
            self.check()  # raises: not held
        assert held is not None
        sql = "SELECT lock_id, fencing, expires > {now} FROM rv_locks WHERE workspace = ?"
        row = self.link.q(conn, sql + (self.link.dialect.for_update if lock else "")).fetchone()
        if row is None or row[0] != held.id or int(row[1]) != held.fencing:
            self.lose("it was removed (force-unlock) or taken over")
        elif not row[2]:
            self.lose("it lapsed by the database's clock")
        self.check()

    def _still_ok(self) -> None:
        if self.held is not None:
            self.check()

    def _reclaim(self, conn: Connection) -> None:
        """After a reconnect: our lease still ours (its beacon taken again), or lost (and the
        beacon left alone, for the holder that has the lease now)."""
        held = self.held
        if held is None or self._lost is not None:
            return
        link = self.link
        sql = "SELECT lock_id, fencing, expires > {now} FROM rv_locks WHERE workspace = ?"
        row = link.q(conn, sql).fetchone()
        ours = row is not None and row[0] == held.id and int(row[1]) == held.fencing and row[2]
        if not ours or not link.dialect.take_beacon(conn, link.workspace):
            self.lose(
                "it was removed (force-unlock), taken or lapsed while this connection was down"
            )
            return
        session = link.dialect.session(conn)
        link.q(
            conn,
            "UPDATE rv_locks SET session = ? WHERE workspace = ? AND lock_id = ?",
            session,
            link.workspace,
            held.id,
        )

    def let_go(self) -> None:
        """A lost lease's beacon given back, so the proof that this holder is gone does not wait
        for its process to end (best effort: the session's end gives it back too)."""
        with contextlib.suppress(StateError, *self.link.dialect.unavailable), self.link.mutex:
            conn = self.link.open()
            if conn is not None:
                self.link.dialect.drop_beacon(conn, self.link.workspace)

    def lose(self, why: str) -> None:
        """Mark the lease lost (said once, by the `LockLostError` the next check raises where the
        process is stopped: `watch` logs it, a command prints it)."""
        if self._lost is None and self.held is not None:
            self._lost = why

    @property
    def lost(self) -> bool:
        return self._lost is not None

    def _lost_message(self, held: LockInfo) -> str:
        return (
            f"The state lease {held.id} of {self.link.where} is no longer this process's:"
            f" {self._lost}. Stopping without another write or call to vast: another ray-vast"
            " may be acting on this state now."
        )

    # -- others' leases --

    def force(self, lock_id: str) -> LockHolder:
        """Remove the lease whose id is `lock_id` and end its holder's session (its beacon
        drops); the token grows, so the old holder's late writes are refused."""
        if self.held is not None and self.held.id == lock_id:
            held = self.held
            self.give_back()
            return LockHolder(held, Liveness.ALIVE)
        return self.link.run(lambda conn: self._force(conn, lock_id))

    def _force(self, conn: Connection, lock_id: str) -> LockHolder:
        link = self.link
        with link.transaction(conn):
            row = self.row(conn, lock=True)
            if row is None:
                raise UnlockRefusedError(
                    f"There is no state lock on {link.where}: nothing to unlock."
                )
            info, left, session = row
            if info.id != lock_id:
                raise UnlockRefusedError(
                    f"The state lock on {link.where} has a different ID than {lock_id!r}; it may"
                    " have been released and taken again since you saw it. Nothing was unlocked."
                )
            link.q(conn, "DELETE FROM rv_locks WHERE workspace = ?")
            link.q(conn, "UPDATE rv_fencing SET token = token + 1 WHERE workspace = ?")
        if session is not None and session != link.dialect.session(conn):
            link.dialect.end_session(conn, session)
        return LockHolder(info, Liveness.ALIVE if left > 0 else Liveness.DEAD, lease_left=left)

    def _beacon_within(self, conn: Connection, seconds: float) -> bool:
        """The workspace's beacon, waited for a moment: with no lock row, a session that still
        holds it is a holder between deleting its row and giving the beacon back (milliseconds),
        and a refusal then could name nobody."""
        deadline = self._monotonic() + seconds
        while not self.link.dialect.take_beacon(conn, self.link.workspace):
            if self._monotonic() >= deadline:
                return False
            time.sleep(RELEASE_POLL_SECONDS)
        return True

    def holder(self) -> LockHolder | None:
        def step(conn: Connection) -> LockHolder | None:
            row = self.row(conn)
            if row is None:
                return None
            info, left, _session = row
            mine = self.held is not None and self.held.id == info.id
            liveness = Liveness.ALIVE if mine else self._liveness(conn, left)
            return LockHolder(info, liveness, lease_left=left)

        return self.link.run(step)


def _releasing(where: str) -> LockInfo:
    return LockInfo("(being released)", "unknown", "unknown@unknown", 0, 0.0, "?", where)
