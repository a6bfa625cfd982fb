"""One store's connection to its database: opened when first needed, reopened after it breaks.

Everything a store says to its database goes through `Link.run(step)`: the step gets a live
connection (the schema brought up to date when it was opened), and a step that fails because the
database cannot be reached is run again on a new connection, up to `RECONNECT_ATTEMPTS` times,
unless `still_ok` (the lease's own deadline) says to stop. A new connection first runs
`on_reconnect`, so the lease can prove it is still its holder's before anything else is done.
One mutex keeps the lease's renewing thread and the store's writes from sharing a connection at
the same moment.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from reconciler.state.errors import StateError
from reconciler.state.sql import schema
from reconciler.state.sql.dialect import Connection, Dialect

RECONNECT_ATTEMPTS = 40
RECONNECT_PAUSE = 0.25

T = TypeVar("T")


class BackendUnavailableError(StateError):
    """The state's database could not be reached (after retrying)."""


def _nothing(conn: Connection) -> None:
    return None


def _fine() -> None:
    return None


class Link:
    def __init__(self, dialect: Dialect, workspace: str) -> None:
        self.dialect = dialect
        self.workspace = workspace
        self.where = f"{dialect.where} (workspace {workspace})"
        self.mutex = threading.RLock()
        self.on_reconnect: Callable[[Connection], None] = _nothing
        self.still_ok: Callable[[], None] = _fine
        self._conn: Connection | None = None

    def q(self, conn: Connection, sql: str, *params: Any) -> Any:
        """One statement; with no parameters given, the workspace is the one."""
        return conn.execute(self.dialect.sql(sql), params or (self.workspace,))

    def run(self, step: Callable[[Connection], T]) -> T:
        for attempt in range(RECONNECT_ATTEMPTS):
            with self.mutex:
                try:
                    return step(self._connection())
                except self.dialect.unavailable as exc:
                    self.drop()
                    if attempt + 1 == RECONNECT_ATTEMPTS:
                        raise BackendUnavailableError(
                            f"the state's database {self.where} cannot be reached: {exc}"
                        ) from exc
            self.still_ok()
            time.sleep(RECONNECT_PAUSE)
        raise AssertionError("unreachable")

    @contextmanager
    def transaction(self, conn: Connection) -> Iterator[Connection]:
        conn.execute(self.dialect.begin)
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(*self.dialect.unavailable):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self.dialect.connect()
            try:
                schema.ensure(conn, self.dialect)
                self.on_reconnect(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def open(self) -> Connection | None:
        """The connection if one is open (none is opened for asking)."""
        return self._conn

    def drop(self) -> None:
        """Forget the connection (closing it if it still closes)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                conn.close()
