"""PID namespaces: each process container's PID 1 is the first process of a namespace of its own.

Containers contain. PID 1 of a container is the first process of a new PID namespace (and the
leader of a new session). When it dies (it exits, or a stop's or a destroy's SIGKILL ends it) the
kernel kills every other process of the namespace, whatever session, process group or environment
it has: Ray starts its agents with `setsid` and their process titles overwrite their environment,
and they end with the container all the same. PID 1 also gets the kernel's signal rules rather
than emulated ones: a signal it has no handler for is dropped, from inside the container or from
the host (KILL and STOP from the host excepted), so `docker stop` of a PID 1 that does not catch
TERM takes the whole grace, as on vast. Orphans are reparented to PID 1, which reaps them or not.

How: a short-lived thread calls unshare(CLONE_NEWPID), which makes that thread's next child PID 1
of a new namespace, and starts `unshare --mount-proc -- <argv>` (util-linux) as that child. As PID
1 it mounts a /proc of its own namespace in a private mount namespace and then execs argv, so PID 1
*is* the container's command, and its host pid is what `pid` returns and what a stop signals. The
mount namespace is there only so that /proc agrees with the pids the container sees (Ray's agents
and our agent look themselves and their process groups up in /proc by pid); every other mount is
the host's, and so is the network (there is no network namespace: containers reach the host's
loopback). `ProcessRunner.host_pid` turns a pid seen inside a container into the host's.

Whether namespaces work is probed once per process (`no_namespaces`, logged); where they do not,
the runner falls back to process groups and markers (`vastsim.containers.sweep`). `popen`, the
plain start of a new session, is that fallback's start and the namespace start's last step.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, cast

from vastsim.containers.cgroups import enter_cgroup

CLONE_NEWPID = 0x20000000
# util-linux unshare(1) run as PID 1 of the new PID namespace: a private mount namespace with a
# /proc of that PID namespace, then exec of the container's argv
SHIM = ("--mount-proc", "--propagation", "private", "--")

log = logging.getLogger(__name__)

_probe_lock = threading.Lock()
_probed: list[str | None] = []  # [why not] once probed; [None] when namespaces work
_unshare_tool: list[str] = []


def no_namespaces() -> str | None:
    """Why containers cannot have PID namespaces here, or None when they can. Probed once per
    process (a real container start: unshare(2) in a thread, then the util-linux shim)."""
    with _probe_lock:
        if not _probed:
            why = _probe()
            if why is not None:
                log.warning(
                    "vastsim: containers get no PID namespace (%s); falling back to process "
                    "groups and markers, so a process that leaves its group and drops its "
                    "environment outlives its container",
                    why,
                )
            _probed.append(why)
        return _probed[0]


def _probe() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    tool = shutil.which("unshare")
    if tool is None:
        return "no unshare(1) from util-linux on PATH"
    try:
        _libc_unshare()
    except (OSError, AttributeError) as exc:
        return f"no unshare(2) in libc ({exc})"
    _unshare_tool[:] = [tool]
    try:
        proc = popen_contained(
            ["sh", "-c", 'printf %s "$$"'],
            Path("/"),
            {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            subprocess.PIPE,
        )
        said, _ = proc.communicate(timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if proc.returncode != 0 or said != b"1":
        return f"a probe container answered {said!r} (exit {proc.returncode})"
    return None


def _libc_unshare() -> Callable[[int], int]:
    fn = ctypes.CDLL(None, use_errno=True).unshare
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast("Callable[[int], int]", fn)


def popen(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    out: IO[bytes] | int,
    procs: int | None = None,
) -> subprocess.Popen[bytes]:
    """`procs`: an open `cgroup.procs` that the child writes itself into before it execs."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=None if procs is None else enter_cgroup(procs),  # noqa: PLW1509
    )


def popen_contained(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    out: IO[bytes] | int,
    procs: int | None = None,
) -> subprocess.Popen[bytes]:
    """`popen` as PID 1 of a new PID namespace (see the module docstring). The thread that
    unshares ends with the call, so no other child of this process lands in the namespace."""
    _check_executable(argv[0], cwd, env)
    unshare = _libc_unshare()
    started: list[subprocess.Popen[bytes]] = []
    failed: list[BaseException] = []

    def spawn() -> None:
        try:
            if unshare(CLONE_NEWPID) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"unshare(CLONE_NEWPID): {os.strerror(code)}")
            started.append(popen([_unshare_tool[0], *SHIM, *argv], cwd, env, out, procs))
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=spawn, name="vastsim-container-start", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return started[0]


def _check_executable(program: str, cwd: Path, env: Mapping[str, str]) -> None:
    """The error Popen would raise for a missing program (the shim would only exit 127)."""
    if "/" in program:
        found = os.access(cwd / program, os.X_OK) and not (cwd / program).is_dir()
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def namespace(pid: int) -> str | None:
    """The PID namespace of a live process ("pid:[4026532177]"), None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_pids(ns: str) -> list[int]:
    """Live processes of a PID namespace, host pids, from /proc (a zombie has no namespace)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and namespace(int(entry)) == ns:
            found.append(int(entry))
    return found


def pid_inside(pid: int) -> int | None:
    """The pid of a process in its own (innermost) PID namespace, from /proc/<pid>/status."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None
