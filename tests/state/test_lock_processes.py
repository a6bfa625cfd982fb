"""The lock and crash safety against real processes: a live holder, a killed one, a crashed writer.

Each test starts `sys.executable -c SCRIPT` and talks to it over pipes: the child prints one line
when it has done something, and waits on stdin when it must hold on. Lines are read with a deadline
rather than by sleeping, and every child is killed and reaped when its test ends.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.state import (
    LOCK_FILE,
    STATE_FILE,
    FileStore,
    Liveness,
    StateLockedError,
    locked,
)
from tests.state.conftest import RecordingClock

ROOT = Path(__file__).parents[2]
DEADLINE_SECONDS = 20.0

HOLD_LOCK = """
import sys
from pathlib import Path
from reconciler.clock import SystemClock
from reconciler.state import FileStore

store = FileStore(Path(sys.argv[1]), clock=SystemClock())
info = store.lock("watch")
print(info.id, flush=True)
sys.stdin.readline()
store.unlock()
print("unlocked", flush=True)
"""

CRASH_BEFORE_RENAME = """
import os
import sys
from pathlib import Path
from reconciler.clock import SystemClock
from reconciler.state import FileStore

class DiesBeforeRename(FileStore):
    def _replace(self, src, dst):
        if dst.name == "state.json":
            os._exit(9)
        super()._replace(src, dst)

store = DiesBeforeRename(Path(sys.argv[1]), clock=SystemClock())
store.lock("apply")
store.write({"n": 2}, based_on=store.read())
"""


class Child:
    """A child process and the lines it prints, read with a deadline."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_line(self) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + DEADLINE_SECONDS
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"child printed nothing in time; stderr: {self.stderr()}"
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 4096)
                assert chunk, f"child exited early; stderr: {self.stderr()}"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def wait(self) -> int:
        return self.proc.wait(timeout=DEADLINE_SECONDS)

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=DEADLINE_SECONDS)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@contextmanager
def child(script: str, *args: str) -> Iterator[Child]:
    started = Child(script, *args)
    try:
        yield started
    finally:
        started.end()


@pytest.fixture
def here(state_dir: Path, clock: RecordingClock) -> FileStore:
    """The test's own store on the directory the children use."""
    return FileStore(state_dir, clock=clock)


def test_a_lock_held_by_a_live_process_is_refused_until_it_is_released(
    state_dir: Path, here: FileStore, clock: RecordingClock
) -> None:
    with child(HOLD_LOCK, str(state_dir)) as holder:
        lock_id = holder.read_line()
        with pytest.raises(StateLockedError) as refused:
            here.lock("apply")
        error = refused.value
        assert (error.info.id, error.info.pid, error.info.operation) == (
            lock_id,
            holder.pid,
            "watch",
        )
        assert error.liveness is Liveness.ALIVE
        assert f"Process {holder.pid}" in str(error)
        with pytest.raises(StateLockedError):
            here.lock("apply", timeout_seconds=10)  # waits on the fake clock, not for real
        assert sum(clock.sleeps) == 10
        holder.tell("release")
        assert holder.read_line() == "unlocked"
        assert holder.wait() == 0
    info = here.lock("apply")
    assert info.pid == os.getpid()
    here.unlock()


def test_a_lock_left_by_a_killed_process_is_reported_stale_and_not_taken(
    state_dir: Path, here: FileStore
) -> None:
    with child(HOLD_LOCK, str(state_dir)) as holder:
        lock_id = holder.read_line()
        holder.proc.kill()
        holder.wait()
    for timeout in (0, 5):
        with pytest.raises(StateLockedError) as refused:
            here.lock("apply", timeout_seconds=timeout)
        error = refused.value
        assert error.stale
        assert error.liveness is Liveness.DEAD
        assert (error.info.id, error.info.pid) == (lock_id, holder.pid)
        assert "STALE" in str(error)
        assert str(holder.pid) in str(error)
        assert f"ray-vast state force-unlock {lock_id}" in str(error)
    assert (state_dir / LOCK_FILE).exists()
    assert here.held is None
    removed = here.force_unlock(lock_id)
    assert removed.liveness is Liveness.DEAD
    with locked(here, "apply") as info:
        assert info.id != lock_id


def test_a_writer_killed_before_its_rename_leaves_the_previous_state(
    state_dir: Path, here: FileStore
) -> None:
    with locked(here, "apply"):
        first = here.write({"n": 1}, based_on=None)
    before = (state_dir / STATE_FILE).read_bytes()
    with child(CRASH_BEFORE_RENAME, str(state_dir)) as writer:
        assert writer.wait() == 9, writer.stderr()
    assert (state_dir / STATE_FILE).read_bytes() == before
    assert here.read() == first
    (temp,) = state_dir.glob(f"{STATE_FILE}.*.tmp")
    assert json.loads(temp.read_text())["serial"] == 2  # written in full, never renamed in
    with pytest.raises(StateLockedError) as refused:
        here.lock("apply")
    assert refused.value.stale
    here.force_unlock(refused.value.info.id)
    with locked(here, "apply"):
        assert not temp.exists()  # the next lock holder clears what the crash left
        assert here.write({"n": 2}, based_on=first).serial == 2
