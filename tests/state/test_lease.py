"""The database lease against real processes and a real PostgreSQL: a live holder in another
process, one killed, one frozen past its lease, the database restarted under a holder, an outage
longer than the lease, two workspaces in one database, a schema from a newer ray-vast.

Each holder is a child process that takes the lease (2 s here, 60 s in use) and then does what
its stdin says; lines are read with a deadline, never by sleeping.
"""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.clock import SystemClock
from reconciler.state import Liveness, LockLostError, StateLockedError, StateTooNewError
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.store import SqlStore
from tests.pgserver import PgServer
from tests.state.test_lock_processes import Child, child
from tests.waiting import wait_for

LEASE = 2.0

HOLDER = """
import sys
from pathlib import Path
from reconciler.clock import SystemClock
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.store import SqlStore

kind, target, workspace, lease = sys.argv[1:5]
dialect = Sqlite(Path(target)) if kind == "sqlite" else Postgres(target, "postgresql://test")
store = SqlStore(dialect, clock=SystemClock(), workspace=workspace, lease_seconds=float(lease))
info = store.lock("apply")
base = store.write({"n": 1}, based_on=store.read())
print(info.id, info.fencing, flush=True)
for line in sys.stdin:
    try:
        if line.strip() == "write":
            base = store.write({"n": base.serial + 1}, based_on=base)
            print("wrote", base.serial, flush=True)
        elif line.strip() == "check":
            store.check_lease()
            print("ok", flush=True)
        elif line.strip() == "unlock":
            store.unlock()
            print("unlocked", flush=True)
    except Exception as exc:
        print("refused", type(exc).__name__, flush=True)
"""


class Backend:
    """One database for a test: a SQLite file, or a workspace on the PostgreSQL server."""

    def __init__(self, kind: str, tmp_path: Path, server: PgServer | None) -> None:
        self.kind, self.server = kind, server
        self.target = str(tmp_path / "state.db") if server is None else server.url()
        self.workspace = "w-" + tmp_path.name[-20:].replace("_", "-")
        self.stores: list[SqlStore] = []

    def dialect(self) -> Sqlite | Postgres:
        if self.kind == "sqlite":
            return Sqlite(Path(self.target))
        return Postgres(self.target, "postgresql://test")

    def store(self, *, workspace: str | None = None, lease: float = LEASE) -> SqlStore:
        made = SqlStore(
            self.dialect(),
            clock=SystemClock(),
            workspace=workspace or self.workspace,
            lease_seconds=lease,
        )
        self.stores.append(made)
        return made

    @contextlib.contextmanager
    def holder(self, lease: float = LEASE) -> Iterator[tuple[Child, str, int]]:
        with child(HOLDER, self.kind, self.target, self.workspace, str(lease)) as held:
            lock_id, fencing = held.read_line().split()
            yield held, lock_id, int(fencing)

    def close(self) -> None:
        for store in self.stores:
            with contextlib.suppress(Exception):
                store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None
    made = Backend(request.param, tmp_path, server)
    yield made
    made.close()


def refusal(store: SqlStore) -> StateLockedError:
    with pytest.raises(StateLockedError) as refused:
        store.lock("apply")
    return refused.value


def test_a_live_holder_in_another_process_is_refused_by_its_own_row(backend: Backend) -> None:
    with backend.holder() as (held, lock_id, fencing):
        error = refusal(backend.store())
        assert (error.info.id, error.info.pid, error.info.fencing) == (lock_id, held.pid, fencing)
        assert error.liveness is Liveness.ALIVE
        assert error.lease_left is not None and 0 < error.lease_left <= LEASE
        message = str(error)
        assert f"PID:       {held.pid}" in message and "expires in" in message
        assert f"ray-vast state force-unlock {lock_id}" in message


def test_a_killed_holder_is_refused_until_its_lease_lapses_then_taken_over(
    backend: Backend,
) -> None:
    with backend.holder() as (held, lock_id, fencing):
        held.proc.send_signal(signal.SIGKILL)
        held.wait()
        store = backend.store()
        if backend.kind == "postgresql":  # its session is gone, its lease not yet lapsed
            wait_for(lambda: refusal(store).liveness is Liveness.LAPSING, 10)
            assert "lapses in" in str(refusal(store))
        else:
            assert refusal(store).liveness is Liveness.ALIVE  # SQLite cannot tell, and waits
        info = store.lock("apply", timeout_seconds=3 * LEASE)
    assert store.taken_over is not None and store.taken_over.id == lock_id
    assert info.fencing == fencing + 1
    snapshot = store.read()
    assert snapshot is not None and snapshot.records == {"n": 1}


def test_a_frozen_holder_writes_nothing_and_calls_nothing_after_its_lease(
    backend: Backend,
) -> None:
    with backend.holder() as (held, lock_id, fencing):
        held.proc.send_signal(signal.SIGSTOP)
        store = backend.store()
        try:
            if backend.kind == "postgresql":  # its session lives: refused, until a person acts
                stuck = wait_for(lambda: _stuck(store), 10)
                assert "is still open" in str(stuck)
                assert store.force_unlock(lock_id).info.id == lock_id
                info = store.lock("apply")
            else:
                info = store.lock("apply", timeout_seconds=3 * LEASE)
            assert info.fencing > fencing
            base = store.read()
            mine = store.write({"n": "the new holder's"}, based_on=base)
        finally:
            held.proc.send_signal(signal.SIGCONT)
        held.tell("check")
        assert held.read_line() == "refused LockLostError"
        held.tell("write")
        assert held.read_line() == "refused LockLostError"
    assert store.read() == mine


def _stuck(store: SqlStore) -> StateLockedError | None:
    error = refusal(store)
    return error if error.liveness is Liveness.STUCK else None


def test_the_database_restarted_under_a_holder_loses_no_write(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    if backend.server is None:
        pytest.skip("a SQLite file has no server to restart")
    store = backend.store(lease=20.0)
    info = store.lock("apply")
    first = store.write({"n": 1}, based_on=None)
    backend.server.restart()
    second = store.write({"n": 2}, based_on=first)
    assert (second.serial, second.lineage) == (2, first.lineage)
    store.check_lease()
    holder = backend.store().lock_holder()
    assert holder is not None and holder.info == info and holder.liveness is Liveness.ALIVE
    assert [s.serial for s in store.history()] == [1]


def test_an_outage_longer_than_the_lease_stops_the_holder_and_another_takes_over(
    backend: Backend,
) -> None:
    if backend.server is None:
        pytest.skip("a SQLite file has no server to lose")
    store = backend.store()
    info = store.lock("apply")
    first = store.write({"n": 1}, based_on=None)
    backend.server.stop()
    try:
        wait_for(lambda: _lost(store), 4 * LEASE, "the holder fenced itself")
    finally:
        backend.server.start()
    other = backend.store()
    taken = other.lock("apply", timeout_seconds=3 * LEASE)
    assert taken.fencing == info.fencing + 1
    with pytest.raises(LockLostError):
        store.write({"n": "late"}, based_on=first)
    assert other.read() == first


def _lost(store: SqlStore) -> bool:
    try:
        store.check_lease()
    except LockLostError:
        return True
    return False


def test_two_workspaces_in_one_database_lock_apart(backend: Backend) -> None:
    one, two = backend.store(workspace="team-a"), backend.store(workspace="team-b")
    one.lock("watch")
    two.lock("apply")  # not refused: another workspace's lease
    one.write({"a": 1}, based_on=None)
    two.write({"b": 2}, based_on=None)
    a, b = backend.store(workspace="team-a").read(), backend.store(workspace="team-b").read()
    assert a is not None and b is not None
    assert (a.records, b.records) == ({"a": 1}, {"b": 2}) and a.lineage != b.lineage


def test_a_database_of_a_newer_schema_is_refused_and_left_alone(backend: Backend) -> None:
    if backend.server is not None:  # a database of its own: the others share the server's
        backend.target = backend.server.new_database("newer_" + backend.workspace.replace("-", "_"))
    store = backend.store()
    assert store.read() is None  # brings the database to this schema
    store.link.run(
        lambda conn: conn.execute("UPDATE rv_meta SET value = '99' WHERE key = 'schema_version'")
    )
    with pytest.raises(StateTooNewError, match="schema 99"):
        backend.store().read()


OPENER = """
import sys
from pathlib import Path
from reconciler.clock import SystemClock
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.store import SqlStore

kind, target = sys.argv[1:3]
dialect = Sqlite(Path(target)) if kind == "sqlite" else Postgres(target, "postgresql://test")
print("ready", flush=True)
sys.stdin.readline()
store = SqlStore(dialect, clock=SystemClock(), workspace="w")
print("read", store.read(), flush=True)
store.close()
"""


def test_two_processes_bring_an_empty_database_to_the_schema_at_once(
    backend: Backend, tmp_path: Path
) -> None:
    """Each schema step runs in its own transaction, serialised between processes: two starting
    together on an empty database both succeed (dstack#3219 deadlocked here)."""
    if backend.server is not None:
        backend.target = backend.server.new_database("empty_" + uuid.uuid4().hex[:8])
    else:
        backend.target = str(tmp_path / "empty.db")
    with (
        child(OPENER, backend.kind, backend.target) as one,
        child(OPENER, backend.kind, backend.target) as two,
    ):
        assert one.read_line() == two.read_line() == "ready"
        one.tell("go")
        two.tell("go")
        assert one.read_line() == two.read_line() == "read None"
        assert one.wait() == two.wait() == 0
