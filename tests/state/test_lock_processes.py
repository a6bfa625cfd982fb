"""The lock and crash safety against real processes: a live holder, a killed one, a crashed writer.

Each test starts `sys.executable -c SCRIPT` and talks to it over pipes: the child prints one line
when it has done something, and waits on stdin when it must hold on. Lines are read with a deadline
rather than by sleeping, and every child is killed and reaped when its test ends.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
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
from reconciler.state.errors import utc_text
from reconciler.state.ledger import LedgerQuery, ledger_path, read_ledger
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


def test_a_lock_left_by_a_killed_process_is_taken_over_and_noted(
    state_dir: Path, here: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    with child(HOLD_LOCK, str(state_dir)) as holder:
        lock_id = holder.read_line()
        holder.proc.send_signal(signal.SIGKILL)
        assert holder.wait() == -signal.SIGKILL
    dead = json.loads((state_dir / LOCK_FILE).read_text())
    with caplog.at_level(logging.WARNING, logger="reconciler.state"):
        info = here.lock("down")
    try:
        assert info.id != lock_id
        assert here.taken_over is not None and here.taken_over.id == lock_id
        assert json.loads((state_dir / LOCK_FILE).read_text())["id"] == info.id
        (said,) = [r.getMessage() for r in caplog.records]
        assert "Took over the state lock" in said
        assert f"`watch` (pid {holder.pid} on " in said
        assert utc_text(dead["created"]) in said
        (noted,) = read_ledger(ledger_path(state_dir), LedgerQuery(class_="lock_taken_over"))
        assert noted.data["dead"]["pid"] == holder.pid and noted.data["lock_id"] == info.id
        assert noted.data["dead"]["operation"] == "watch"
        other = FileStore(state_dir, clock=RecordingClock())
        with pytest.raises(StateLockedError) as refused:  # and the new owner is alive
            other.lock("apply")
        assert refused.value.liveness is Liveness.ALIVE and refused.value.info.id == info.id
    finally:
        here.unlock()
    assert not (state_dir / LOCK_FILE).exists()
    with locked(here, "apply"):
        assert here.taken_over is None  # a lock released cleanly is simply taken


@pytest.mark.parametrize("attempt", range(3))
def test_lockers_racing_for_a_killed_owners_lock_one_takes_it_over(
    state_dir: Path, attempt: int
) -> None:
    with child(HOLD_LOCK, str(state_dir)) as holder:
        holder.read_line()
        holder.proc.kill()
        holder.wait()
    stores = [FileStore(state_dir, clock=RecordingClock()) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[object] = [None] * len(stores)

    def take(n: int) -> None:
        barrier.wait()
        try:
            outcomes[n] = stores[n].lock("apply")
        except StateLockedError as exc:
            outcomes[n] = exc

    threads = [threading.Thread(target=take, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE_SECONDS)
    winners = [n for n, o in enumerate(outcomes) if not isinstance(o, StateLockedError)]
    assert len(winners) == 1, outcomes
    (winner,) = winners
    on_disk = json.loads((state_dir / LOCK_FILE).read_text())["id"]
    held = stores[winner].held
    assert held is not None and held.id == on_disk
    stores[winner].unlock()


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
    with locked(here, "apply"):
        assert here.taken_over is not None  # the dead writer's lock
        assert not temp.exists()  # the next lock holder clears what the crash left
        assert here.write({"n": 2}, based_on=first).serial == 2
