"""Detached helper processes that outlive one command and are found again by the next.

Each is started in its own session (so it and everything it starts form one process group that
can be ended at once) and recorded in `<state_dir>/embedded.json` (0600): what it is, its pid and
how to reach it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reconciler.childenv import child_environment

RECORD_FILE = "embedded.json"

# The detached processes this process started. They are meant to outlive the command; holding
# their Popen objects keeps Python from warning that a child it forgot is still running.
_DETACHED: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class Started:
    name: str
    pid: int
    info: Mapping[str, Any]


def records(state_dir: Path) -> dict[str, Started]:
    path = state_dir / RECORD_FILE
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {name: Started(name, int(doc["pid"]), dict(doc["info"])) for name, doc in raw.items()}


def remember(state_dir: Path, started: Started) -> None:
    with _locked(state_dir):
        current = {n: asdict(s) for n, s in records(state_dir).items()}
        current[started.name] = asdict(started)
        _write(state_dir, current)


def forget(state_dir: Path, name: str) -> None:
    with _locked(state_dir):
        current = {n: asdict(s) for n, s in records(state_dir).items() if n != name}
        _write(state_dir, current)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """One change of the record file at a time: `up` starts the simulator and the Ray heads at
    once, and a lost update would leave a process nobody stops."""
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(state_dir / (RECORD_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write(state_dir: Path, doc: Mapping[str, Any]) -> None:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / RECORD_FILE
    temp = path.with_suffix(".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out, indent=2)
    os.replace(temp, path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def spawn(argv: Sequence[str], *, env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A detached process group writing to `log`; stdin closed; never the account's key."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            env=child_environment(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _DETACHED.append(proc)
    return proc


def wait_for_line(log: Path, marker: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The first line of `log` that contains `marker`, waiting for it with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}; see {log}")
        time.sleep(0.05)
    raise TimeoutError(f"no {marker!r} in {log} after {timeout}s")


def wait_for_port(
    host: str, port: int, proc: subprocess.Popen[bytes], timeout: float, *, log: Path
) -> None:
    """Until something accepts connections on (host, port), with a deadline; the process
    exiting meanwhile is an error."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}; see {log}")
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s; see {log}")


def stop_group(pid: int, *, grace: float = 10.0) -> None:
    """TERM the process group, then KILL it if it has not gone within `grace` seconds; a child
    of this process is reaped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for proc in [p for p in _DETACHED if p.pid == pid]:
        proc.wait(timeout=grace)
        _DETACHED.remove(proc)
