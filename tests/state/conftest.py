"""Fixtures for the state tests: a clock that records its sleeps, and stores on one backing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.clock import FakeClock
from reconciler.state import FileStore, Identity, MemoryBackend, MemoryStore, StateStore

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

    def make(self, *, pid: int = 4242, secrets: tuple[str, ...] = ()) -> StateStore:
        identity = Identity(who=f"tester@{_host()}", pid=pid)
        if self.kind == "file":
            return FileStore(
                self.tmp_path / ".ray-vast", clock=self.clock, identity=identity, secrets=secrets
            )
        return MemoryStore(self.backend, clock=self.clock, identity=identity, secrets=secrets)


def _host() -> str:
    return Identity.current().who.rpartition("@")[2]


@pytest.fixture
def clock() -> RecordingClock:
    return RecordingClock()


@pytest.fixture(params=["file", "memory"])
def stores(request: pytest.FixtureRequest, clock: RecordingClock, tmp_path: Path) -> Stores:
    return Stores(request.param, clock, tmp_path)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / ".ray-vast"


@pytest.fixture
def file_store(state_dir: Path, clock: RecordingClock) -> FileStore:
    return FileStore(state_dir, clock=clock, secrets=(SECRET,))
