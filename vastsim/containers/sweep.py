"""The sweep: process groups and environment markers, the fallback where there are no namespaces.

Fallback: without PID namespaces (not root, EPERM, no util-linux `unshare`, not Linux; probed once
per process and logged, see `vastsim.containers.pidns`) PID 1 of a container is only the leader of
a new session (`start_new_session`), the container is signalled and killed as one process group,
and processes that left the group are found by their marker (below). A process that left the
group *and* lost its environment then outlives its container. `ProcessRunner(contain=False)` asks
for the fallback.

Every process of a container carries `VASTSIM_CONTAINER=<runner>.<instance>.<boot>` in its
environment: the fallback finds processes that left the group by it, and with namespaces one sweep
after a container's end is a cheap second belt.

A container is named here by its PID 1 (`proc`), its marker, and its PID namespace (None in the
fallback), so this module knows nothing of the runner's bookkeeping.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from vastsim.containers.pidns import namespace_pids

MARKER = "VASTSIM_CONTAINER"


def members(proc: subprocess.Popen[bytes], namespace: str | None) -> list[int]:
    """The live processes of one container: its namespace's, or (fallback) its group's."""
    if namespace is None:
        return group_pids(proc.pid)
    if proc.poll() is not None:
        return []  # PID 1 reaped: the kernel has ended the namespace (its id may be reused)
    return namespace_pids(namespace)


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(entry))
    return found


def killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def marked_pids(prefix: str) -> list[int]:
    """Processes whose environment has `VASTSIM_CONTAINER=<prefix>...`, from /proc."""
    needle = f"{MARKER}={prefix}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if any(item.startswith(needle) for item in environ.split(b"\0")):
            found.append(int(entry))
    return found


def kill_marked(prefix: str) -> None:
    for pid in marked_pids(prefix):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def end_group(proc: subprocess.Popen[bytes], marker: str, namespace: str | None) -> None:
    """SIGKILL the container and reap PID 1. In a PID namespace that is all: PID 1 is reaped only
    once the kernel has ended every other process of the namespace; then one marker sweep. In
    the fallback: the group and the strays that left it, until none is left."""
    killpg(proc.pid, signal.SIGKILL)
    if namespace is not None:
        proc.send_signal(signal.SIGKILL)  # PID 1 itself, should it have left its group
    else:
        kill_marked(marker)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if namespace is not None and proc.returncode is not None:
        kill_marked(marker)
        return
    deadline = time.monotonic() + 5.0
    while (group_pids(proc.pid) or marked_pids(marker)) and time.monotonic() < deadline:
        killpg(proc.pid, signal.SIGKILL)
        kill_marked(marker)
        time.sleep(0.01)
