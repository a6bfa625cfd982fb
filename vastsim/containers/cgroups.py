"""CPU-accounting cgroups: each process container has one of its own where the machine allows it.

A container has a CPU-accounting cgroup of its own when the machine allows it (root, and a
writable cgroup hierarchy: the v1 `cpuacct` one when the runner's /proc/self/cgroup lists it, as
the agent reads that one first, else the v2 unified one): `<its mount>/<the runner's own
cgroup>/vastsim/<instance>-<runner>.<boot>`, made before the container starts, entered by PID 1
between fork and exec (so every process of the container is born in it), and removed when the
container has ended (destroy, stop, exit; whatever is still in it then is killed first; shutdown
removes them all). A real vast container sees its cgroup, and the agent's sample reads its own CPU
from it; ours now does too. Where no cgroup can be made the container runs without one (logged
once); a container never fails for it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

CGROUP_DIR = "vastsim"

log = logging.getLogger(__name__)

_cgroup_lock = threading.Lock()
_cgroup_probed: list[Path | None] = []


class Cgroups:
    """The cgroups of one runner's containers, below `cgroup_base()`. Not locked: the runner
    calls it under its own lock."""

    def __init__(self) -> None:
        self.base = cgroup_base()
        self._left: list[Path] = []  # ended containers' cgroups not yet removed
        self._warned = False

    def make(self, name: str) -> Path | None:
        """A new container's cgroup, or None (said once) where none can be made."""
        if self.base is None:
            return None
        path = self.base / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("vastsim: containers run without a cgroup of their own (%s)", exc)
            return None
        return path

    def remove(self, path: Path | None) -> None:
        """Remove an ended container's cgroup (killing what is still in it); retried in `retry`
        and `close` while the kernel still counts a process in it."""
        if path is not None and not rmdir_cgroup(path) and path not in self._left:
            self._left.append(path)

    def retry(self) -> None:
        """One more attempt at each cgroup the kernel refused so far (the runner's `step`)."""
        if self._left:
            self._left = [c for c in self._left if not rmdir_cgroup(c, 1)]

    def close(self) -> None:
        """The runner's shutdown: the cgroups left (for up to 5 seconds; the ones still there
        are said), then the runner's own directory when no other runner's containers are in it."""
        deadline = time.monotonic() + 5.0
        while self._left and time.monotonic() < deadline:
            self._left = [c for c in self._left if not rmdir_cgroup(c)]
            if self._left:
                time.sleep(0.02)
        for path in self._left:
            log.warning("vastsim: could not remove the cgroup %s", path)
        if self.base is not None:
            with contextlib.suppress(OSError):  # another runner's containers may be in it
                self.base.rmdir()


def cgroup_base() -> Path | None:
    """Where this process makes its containers' cgroups (`.../vastsim`), or None where it
    cannot. Probed once per process and logged once."""
    with _cgroup_lock:
        if not _cgroup_probed:
            base, why = _probe_cgroup()
            if base is None:
                log.info("vastsim: containers get no cgroup of their own (%s)", why)
            _cgroup_probed.append(base)
        return _cgroup_probed[0]


def _probe_cgroup() -> tuple[Path | None, str]:
    if not sys.platform.startswith("linux"):
        return None, f"not Linux ({sys.platform})"
    try:
        own = Path("/proc/self/cgroup").read_text()
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError as exc:
        return None, str(exc)
    where = cgroup_hierarchy(own, mountinfo)
    if where is None:
        return None, "no cpuacct (v1) or unified (v2) cgroup hierarchy is mounted"
    base = where / CGROUP_DIR
    try:
        base.mkdir(exist_ok=True)
    except OSError as exc:
        return None, f"cannot make {base}: {exc}"
    if not os.access(base, os.W_OK):
        return None, f"{base} is not writable"
    return base, ""


def cgroup_hierarchy(own: str, mountinfo: str) -> Path | None:
    """The directory of this process's own cgroup in the hierarchy that counts CPU (the v1
    `cpuacct` one when /proc/self/cgroup lists it, as the agent's sample reads that one first;
    else the v2 one), below its mount in /proc/self/mountinfo."""
    v1: str | None = None
    v2: str | None = None
    for line in own.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "cpuacct" in parts[1].split(","):
            v1 = parts[2]
    version, path = (1, v1) if v1 is not None else (2, v2)
    if path is None:
        return None
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if len(fields) < 5 or not after:
            continue
        if version == 1:
            if after[0] != "cgroup" or "cpuacct" not in (after[2:3] or [""])[0].split(","):
                continue
        elif after[0] != "cgroup2":
            continue
        root = fields[3].rstrip("/")
        if root and path != root and not path.startswith(root + "/"):
            continue
        return Path(fields[4].replace("\\040", " ")) / path[len(root) :].strip("/")
    return None


def open_procs(cgroup: Path | None) -> int | None:
    """The cgroup's `cgroup.procs`, opened before the fork for `enter_cgroup`; None without."""
    if cgroup is None:
        return None
    try:
        return os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None


def enter_cgroup(procs: int) -> Callable[[], None]:
    """The pre-exec step that moves the child into a cgroup: "0" written to `cgroup.procs` is
    the writer itself (v1 and v2). One write to an fd opened before the fork: nothing that could
    take a lock in the forked child; a failure leaves the container outside, never unstarted."""

    def enter() -> None:
        with contextlib.suppress(OSError):
            os.write(procs, b"0")

    return enter


def cgroup_pids(cgroup: Path) -> list[int]:
    """The processes in a cgroup (host pids), from its `cgroup.procs`."""
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split() if p.isdigit()]


def rmdir_cgroup(cgroup: Path, attempts: int = 50) -> bool:
    """Remove an ended container's cgroup: kill what is still in it, then rmdir (which the
    kernel refuses while a process, a dying one too, is counted in it). False while the kernel
    still refuses (EBUSY: try again later); True once it is gone, or when it cannot ever be
    removed (said once here: a container that made cgroups of its own below it, say)."""
    for attempt in range(attempts):
        try:
            cgroup.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("vastsim: cannot remove the cgroup %s: %s", cgroup, exc)
                return True
        for pid in cgroup_pids(cgroup):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if attempt + 1 < attempts:
            time.sleep(0.01)
    return False
