"""The two SQL databases a state can live in, and the little that differs between them.

The statements are written once, with `?` placeholders and `{now}` for the database's clock; a
dialect turns them into its own (`%s` for psycopg) and says how a write transaction begins, how a
row is locked for it, and how a holder's session is proven gone. SQLite is the one-machine
backend (a file on a local disk: WAL does not work over a network filesystem); PostgreSQL is a
team's, reached from any runner.

PostgreSQL's proof that a holder's session is gone is its session advisory lock (the "beacon"):
the holder takes it on the connection that renews its lease and the server drops it when that
session ends, however it ends. SQLite has no sessions to ask about: a lapsed lease is the proof
(the holder fences itself before it lapses, and the database refuses its late writes by their
fencing token). PostgreSQL also rings a bell (LISTEN/NOTIFY) when an order or its answer is
written, so the one waiting for it wakes at once; SQLite's waiters poll.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from reconciler.state.files import ensure_private_dir

# How long SQLite waits on another writer's transaction before it says "locked".
SQLITE_BUSY_MS = 10_000
# PostgreSQL: how long a session may sit idle inside a transaction, and a statement wait on a
# row lock, before the server gives up on it.
STUCK_MS = 2_000


class Connection(Protocol):
    """What both drivers' connections give: `execute` returning a cursor, and `close`."""

    def execute(self, sql: str, params: Any = ...) -> Any: ...

    def close(self) -> None: ...


class Dialect(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def now(self) -> str:
        """The database's clock, in epoch seconds."""
        ...

    @property
    def for_update(self) -> str:
        """What locks a row read for a write."""
        ...

    @property
    def serial_key(self) -> str:
        """An auto-numbered primary key."""
        ...

    @property
    def begin(self) -> str:
        """How a write transaction begins."""
        ...

    @property
    def unavailable(self) -> tuple[type[BaseException], ...]:
        """The driver's errors that mean "the database could not be reached" (retry)."""
        ...

    @property
    def where(self) -> str:
        """The database, as messages say it (no password)."""
        ...

    def connect(self) -> Connection: ...

    def sql(self, text: str) -> str: ...

    def take_beacon(self, conn: Connection, workspace: str) -> bool: ...

    def drop_beacon(self, conn: Connection, workspace: str) -> None: ...

    def beacon_free(self, conn: Connection, workspace: str) -> bool | None: ...

    def session(self, conn: Connection) -> int | None: ...

    def end_session(self, conn: Connection, session: int) -> None: ...

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        """Tell the listeners of `channel` (at the commit of the transaction it is in)."""
        ...

    def listen(self, channel: str) -> Bell | None:
        """A connection of its own that hears `channel`; None where nothing can be heard
        (SQLite: its waiters poll)."""
        ...


@dataclass(frozen=True)
class Sqlite:
    path: Path
    name: str = "sqlite"
    now: str = "((julianday('now') - 2440587.5) * 86400.0)"
    for_update: str = ""
    serial_key: str = "INTEGER PRIMARY KEY AUTOINCREMENT"
    begin: str = "BEGIN IMMEDIATE"
    unavailable: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)

    @property
    def where(self) -> str:
        return f"sqlite://{self.path}"

    def connect(self) -> Connection:
        """A connection in autocommit mode (transactions are begun explicitly), WAL, the file
        created 0600 in a 0700 directory: it holds the account's machines."""
        ensure_private_dir(self.path.parent)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(
            self.path, timeout=SQLITE_BUSY_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def sql(self, text: str) -> str:
        return text.replace("{now}", self.now)

    def take_beacon(self, conn: Connection, workspace: str) -> bool:
        return True

    def drop_beacon(self, conn: Connection, workspace: str) -> None:
        return None

    def beacon_free(self, conn: Connection, workspace: str) -> bool | None:
        return None  # nothing to ask: a lapsed lease is the proof

    def session(self, conn: Connection) -> int | None:
        return None

    def end_session(self, conn: Connection, session: int) -> None:
        return None

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        return None

    def listen(self, channel: str) -> Bell | None:
        return None


def beacon_key(workspace: str) -> int:
    """The advisory lock's key of a workspace: a signed 64-bit number from its name, so two
    workspaces in one database never share one (Terraform's pg backend bug, terraform#22833)."""
    digest = hashlib.sha256(f"ray-vast:{workspace}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass(frozen=True)
class Postgres:
    conninfo: str
    where: str
    name: str = "postgresql"
    now: str = "extract(epoch from clock_timestamp())::float8"
    for_update: str = " FOR UPDATE"
    serial_key: str = "BIGSERIAL PRIMARY KEY"
    begin: str = "BEGIN"
    connect_timeout: int = 5

    @property
    def unavailable(self) -> tuple[type[BaseException], ...]:
        import psycopg  # noqa: PLC0415 - only a state in PostgreSQL pays its 0.1 s import

        return (psycopg.OperationalError, psycopg.InterfaceError)

    def connect(self) -> Connection:
        """An autocommit connection with keepalives, so a cut-off peer is noticed in seconds."""
        import psycopg  # noqa: PLC0415 - as above

        conn: Connection = psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=self.connect_timeout,
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
            application_name="ray-vast",
            # A holder frozen or cut off inside a transaction must not hold the rows its peers
            # lock: the server ends such a session (its beacon drops with it), and a waiter
            # gives up and retries rather than hanging. Our transactions last milliseconds.
            options=f"-c idle_in_transaction_session_timeout={STUCK_MS} -c lock_timeout={STUCK_MS}",
        )
        return conn

    def sql(self, text: str) -> str:
        return text.replace("{now}", self.now).replace("?", "%s")

    def take_beacon(self, conn: Connection, workspace: str) -> bool:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (beacon_key(workspace),)).fetchone()
        return bool(row[0])

    def drop_beacon(self, conn: Connection, workspace: str) -> None:
        conn.execute("SELECT pg_advisory_unlock(%s)", (beacon_key(workspace),))

    def beacon_free(self, conn: Connection, workspace: str) -> bool | None:
        """Whether no session holds the workspace's beacon (taken and given back at once)."""
        if not self.take_beacon(conn, workspace):
            return False
        self.drop_beacon(conn, workspace)
        return True

    def session(self, conn: Connection) -> int | None:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        return int(row[0])

    def end_session(self, conn: Connection, session: int) -> None:
        conn.execute("SELECT pg_terminate_backend(%s, 5000)", (session,))  # waits for its end

    def notify(self, conn: Connection, channel: str, payload: str) -> None:
        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

    def listen(self, channel: str) -> Bell | None:
        return PgBell(self, channel)


class Bell(Protocol):
    def wait(self, seconds: float, matches: Callable[[str], bool]) -> bool:
        """Wait up to `seconds` for a notification whose payload `matches`: True when one came
        (False: the time ran out, or nothing can be heard now; the caller looks anyway)."""
        ...

    def close(self) -> None: ...


class PgBell:
    """LISTEN on a connection of its own (PostgreSQL's NOTIFY wakes a waiter at once, where a
    poll would find the row up to a poll later). A connection lost is opened again at the next
    wait; meanwhile the wait just sleeps, and the caller's look finds what came."""

    def __init__(self, dialect: Postgres, channel: str) -> None:
        self.dialect = dialect
        self.channel = channel
        self._conn: Any = None

    def wait(self, seconds: float, matches: Callable[[str], bool]) -> bool:
        deadline = time.monotonic() + max(seconds, 0.0)
        try:
            conn = self._listening()
            while (left := deadline - time.monotonic()) > 0:
                for note in conn.notifies(timeout=left, stop_after=1):
                    if matches(note.payload):
                        return True
            return False
        except self.dialect.unavailable:
            self.close()
            time.sleep(max(deadline - time.monotonic(), 0.0))
            return False

    def _listening(self) -> Any:
        if self._conn is None:
            conn = self.dialect.connect()
            conn.execute(f'LISTEN "{self.channel}"')
            self._conn = conn
        return self._conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
