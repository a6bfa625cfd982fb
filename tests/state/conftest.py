"""Fixtures for the state tests: a clock that records its sleeps, and stores on one backing."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.clock import FakeClock
from reconciler.state import (
    FileStore,
    Identity,
    MemoryBackend,
    MemoryStore,
    StateError,
    StateStore,
)
from reconciler.state.sql.dialect import Postgres, Sqlite
from reconciler.state.sql.store import SqlStore

SECRET = "vk_live_7c1e0b9a44f2d83e56b1a0c9d7e2f415"


class RecordingClock(FakeClock):
    """A fake clock that remembers each sleep and can run a callback when slept on."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[], None] | None = None

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)
        if self.on_sleep is not None:
            self.on_sleep()


@dataclass
class Stores:
    """Makes stores that share one backing (a directory, or a memory backend)."""

    kind: str
    clock: RecordingClock
    tmp_path: Path
    backend: MemoryBackend = field(default_factory=MemoryBackend)
    postgres: str = ""  # the server's URL, for the postgresql kind
    made: list[SqlStore] = field(default_factory=list)

    def make(self, *, pid: int = 4242, secrets: tuple[str, ...] = ()) -> StateStore:
        identity = Identity(who=f"tester@{_host()}", pid=pid)
        if self.kind == "file":
            return FileStore(
                self.tmp_path / ".ray-vast", clock=self.clock, identity=identity, secrets=secrets
            )
        if self.kind in ("sqlite", "postgresql"):
            store = SqlStore(
                self.dialect(),
                clock=self.clock,
                workspace=self.workspace,
                identity=identity,
                secrets=secrets,
            )
            self.made.append(store)
            return store
        return MemoryStore(self.backend, clock=self.clock, identity=identity, secrets=secrets)

    def dialect(self) -> Sqlite | Postgres:
        if self.kind == "sqlite":
            return Sqlite(self.tmp_path / "state.db")
        return Postgres(self.postgres, "postgresql://test")

    @property
    def workspace(self) -> str:
        """One per test directory: the tests share one PostgreSQL database."""
        return "t-" + hashlib.sha256(str(self.tmp_path).encode()).hexdigest()[:16]

    def elsewhere(self, tmp_path: Path) -> Stores:
        """Stores of another state, on the same kind of backend."""
        return Stores(self.kind, self.clock, tmp_path, postgres=self.postgres, made=self.made)

    def close(self) -> None:
        """Close every database store made (a lease still held is given back)."""
        for store in self.made:
            with contextlib.suppress(StateError):
                store.close()


def _host() -> str:
    return Identity.current().who.rpartition("@")[2]


@pytest.fixture
def clock() -> RecordingClock:
    return RecordingClock()


@pytest.fixture(
    params=["file", "memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]
)
def stores(
    request: pytest.FixtureRequest, clock: RecordingClock, tmp_path: Path
) -> Iterator[Stores]:
    postgres = request.getfixturevalue("pg_server").url() if request.param == "postgresql" else ""
    made = Stores(request.param, clock, tmp_path, postgres=postgres)
    yield made
    made.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / ".ray-vast"


@pytest.fixture
def file_store(state_dir: Path, clock: RecordingClock) -> FileStore:
    return FileStore(state_dir, clock=clock, secrets=(SECRET,))
