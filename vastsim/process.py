"""The process runner: each container is a local process tree with vast's environment, in a PID
namespace of its own.

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
loopback). `host_pid` turns a pid seen inside a container into the host's.

Fallback: without PID namespaces (not root, EPERM, no util-linux `unshare`, not Linux; probed once
per process and logged) PID 1 of a container is only the leader of a new session
(`start_new_session`), the container is signalled and killed as one process group, and processes
that left the group are found by their marker (below). A process that left the group *and* lost
its environment then outlives its container. `ProcessRunner(contain=False)` asks for the fallback.

Every process of a container carries `VASTSIM_CONTAINER=<runner>.<instance>.<boot>` in its
environment: the fallback finds processes that left the group by it, and with namespaces one sweep
after a container's end is a cheap second belt.

What runs as PID 1:
- `runtype: args`: the create's `args` as argv, run directly (no shell). When the create also has
  `onstart`, it is the entrypoint (that is where the official CLI puts `--entrypoint`, and how
  dstack runs `onstart: /bin/sh` with `args: ["-c", script]`): argv = split(onstart) + args.
- any other runtype: `sh -c '<onstart>'` followed by an idle PID 1, because on vast the ssh/jupyter
  entrypoint keeps the container up after the onstart script ends.

There is no NAT on one machine: each published container port p gets a free local port P, the
container sees `VAST_TCP_PORT_<p>=P` (as on vast) and must listen on P itself, which is what vast's
identity mappings (ports above 70000) ask of containers too. Each instance has its own loopback
address 127.a.b.c (never 127.0.0.1, never shared by two live instances; an IP change gives it
another): it is `PUBLIC_IPADDR`, and `VASTSIM_SOURCE_IP` tells the container's processes to bind
their outgoing connections to it (on vast the host's NAT does that), so a server on 127.0.0.1 sees
which instance is calling. Linux routes the whole 127.0.0.0/8 to `lo`, so binding any of them
needs no configuration, in a loopback-only network namespace too.

A container also has a CPU-accounting cgroup of its own when the machine allows it (root, and a
writable cgroup hierarchy: the v1 `cpuacct` one when the runner's /proc/self/cgroup lists it, as
the agent reads that one first, else the v2 unified one): `<its mount>/<the runner's own
cgroup>/vastsim/<instance>-<runner>.<boot>`, made before the container starts, entered by PID 1
between fork and exec (so every process of the container is born in it), and removed when the
container has ended (destroy, stop, exit; whatever is still in it then is killed first; shutdown
removes them all). A real vast container sees its cgroup, and the agent's sample reads its own CPU
from it; ours now does too. Where no cgroup can be made the container runs without one (logged
once); a container never fails for it.

stdout and stderr go to `<workdir>/<instance id>/container.log` (served by request_logs); the
container's working directory and `DATA_DIRECTORY` is `<workdir>/<instance id>/workspace`. Its
`TMPDIR` is a directory of its own (`tmpdir`), as a container has its own /tmp; the host's /tmp
stays visible, as the host's filesystem is the image here.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from vastsim.runners import ContainerSpec

HOST_NETWORK_ENV = "VASTSIM_HOST_NETWORK"  # agent/sampling.py reads it (the agent has no vastsim)

IDLE = "exec sleep infinity"


MARKER = "VASTSIM_CONTAINER"
# Ray's fixed default ports (GCS, dashboard, client server, dashboard agent): a Ray in a container
# takes them for itself whatever ports it is told, so no published port is one of them.
RESERVED = frozenset({6379, 8265, 10001, 52365, 52366})

CLONE_NEWPID = 0x20000000
# util-linux unshare(1) run as PID 1 of the new PID namespace: a private mount namespace with a
# /proc of that PID namespace, then exec of the container's argv
SHIM = ("--mount-proc", "--propagation", "private", "--")

log = logging.getLogger(__name__)


@dataclass
class _Group:
    proc: subprocess.Popen[bytes]
    boot: int
    marker: str
    namespace: str | None  # PID 1's PID namespace ("pid:[...]"); None without namespaces
    cgroup: Path | None = None  # the container's CPU-accounting cgroup; None without one
    kill_at: float | None = None  # monotonic time to escalate a stop to SIGKILL


class ProcessRunner:
    """Containers as local process trees, each in its own PID namespace (real time only)."""

    loopback_ips = True

    def __init__(
        self,
        workdir: str | Path,
        *,
        stop_grace: float = 10.0,
        base_env: Mapping[str, str] | None = None,
        contain: bool | None = None,
    ) -> None:
        """`contain`: PID namespaces when available (None), always (True: an error when they are
        not), or never (False: the process-group fallback)."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stop_grace = stop_grace
        self.base_env = dict(
            base_env
            if base_env is not None
            else {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        )
        why = no_namespaces() if contain is not False else "not asked for"
        if contain and why is not None:
            raise RuntimeError(f"vastsim: no PID namespaces for containers: {why}")
        self.contained = why is None
        self._token = secrets.token_hex(6)
        self._live: dict[int, _Group] = {}
        self._dying: dict[int, list[_Group]] = {}
        self._lock = threading.RLock()
        self._cgroup_base = cgroup_base()
        self._cgroups_left: list[Path] = []  # ended containers' cgroups not yet removed
        self._cgroup_warned = False

    # -- ports --------------------------------------------------------------------------------

    def allocate_ports(self, instance_id: int, wanted: list[str]) -> dict[str, int]:
        """Free local ports, one per wanted container port (bound together so they differ),
        never one of Ray's fixed defaults (`RESERVED`): a worker that is told to use one would
        find its own Ray wanting it for something else."""
        held: list[socket.socket] = []
        out: dict[str, int] = {}
        try:
            for key in wanted:
                kind = socket.SOCK_DGRAM if key.endswith("/udp") else socket.SOCK_STREAM
                while True:
                    sock = socket.socket(socket.AF_INET, kind)
                    held.append(sock)  # a reserved one stays held: the next draw differs
                    sock.bind(("127.0.0.1", 0))
                    port = int(sock.getsockname()[1])
                    if port not in RESERVED:
                        break
                out[key] = port
        finally:
            for sock in held:
                sock.close()
        return out

    # -- life cycle ---------------------------------------------------------------------------

    def instance_dir(self, instance_id: int) -> Path:
        return self.workdir / str(instance_id)

    def workspace(self, instance_id: int) -> Path:
        return self.instance_dir(instance_id) / "workspace"

    @staticmethod
    def _without_ray(workspace: Path) -> Path:
        """A directory whose `ray` is what an image without Ray has: the shell's "not found"
        (exit 127), found first on the container's PATH."""
        shim = workspace / ".vastsim-no-ray"
        shim.mkdir(exist_ok=True)
        ray = shim / "ray"
        ray.write_text('#!/bin/sh\necho "sh: 1: ray: not found" >&2\nexit 127\n')
        ray.chmod(0o755)
        return shim

    def log_path(self, instance_id: int) -> Path:
        return self.instance_dir(instance_id) / "container.log"

    def tmpdir(self, instance_id: int) -> Path:
        """The container's own temporary directory (its `TMPDIR`), kept across a stop as its disk
        is and removed with the instance. Short and below /tmp: Ray puts unix sockets in it,
        whose paths may not pass 107 bytes."""
        return Path(tempfile.gettempdir()) / f"vastsim-{self._token}-{instance_id}"

    def start(self, spec: ContainerSpec, now: float) -> None:
        workspace = self.workspace(spec.instance_id)
        workspace.mkdir(parents=True, exist_ok=True)
        env = {**self.base_env, "HOME": str(workspace), **spec.env}
        env["DATA_DIRECTORY"] = str(workspace)
        # its own TMPDIR, as a container has its own /tmp: the agent starts Ray with its temp dir
        # there, so Ray nodes of two containers never share a session directory and race for its
        # socket names (issue 21's CI: one of three raylets started at once never registered)
        tmp = self.tmpdir(spec.instance_id)
        tmp.mkdir(mode=0o700, exist_ok=True)
        env["TMPDIR"] = str(tmp)
        # its network is the host's (no namespace of its own): the agent counts no interface
        env[HOST_NETWORK_ENV] = "1"
        marker = f"{self._token}.{spec.instance_id}.{spec.boot}"
        env[MARKER] = marker
        if not spec.has_ray:
            env["PATH"] = f"{self._without_ray(workspace)}{os.pathsep}{env.get('PATH', '')}"
        argv = command(spec)
        with self._lock:
            self._kill_live(spec.instance_id)
            cgroup = self._make_cgroup(f"{spec.instance_id}-{self._token}.{spec.boot}")
            procs = _open_procs(cgroup)
            try:
                with open(self.log_path(spec.instance_id), "ab") as out:
                    if self.contained:
                        proc = _popen_contained(argv, workspace, env, out, procs)
                        namespace = _namespace(proc.pid)
                    else:
                        proc = _popen(argv, workspace, env, out, procs)
                        namespace = None
            except BaseException:
                self._remove_cgroup(cgroup)
                raise
            finally:
                if procs is not None:
                    os.close(procs)
            group = _Group(proc, spec.boot, marker, namespace, cgroup)
            self._live[spec.instance_id] = group

    def stop(self, instance_id: int, now: float) -> None:
        """docker stop: TERM to the group, KILL after `stop_grace` seconds (in `step`)."""
        with self._lock:
            group = self._live.pop(instance_id, None)
            if group is None:
                return
            _killpg(group.proc.pid, signal.SIGTERM)
            group.kill_at = time.monotonic() + self.stop_grace
            self._dying.setdefault(instance_id, []).append(group)

    def destroy(self, instance_id: int, now: float) -> None:
        """Kill the container at once (PID 1, and with it everything else) and reap it."""
        with self._lock:
            groups = self._dying.pop(instance_id, [])
            live = self._live.pop(instance_id, None)
            if live is not None:
                groups.append(live)
            for group in groups:
                _end_group(group)
            _kill_marked(f"{self._token}.{instance_id}.")
            for group in groups:
                self._remove_cgroup(group.cgroup)
            shutil.rmtree(self.tmpdir(instance_id), ignore_errors=True)

    def signal(self, instance_id: int, sig: int, now: float) -> bool:
        """A signal to PID 1 only (the simulator filters which ones get here)."""
        with self._lock:
            group = self._live.get(instance_id)
            if group is None or group.proc.poll() is not None:
                return False
            with contextlib.suppress(ProcessLookupError):
                os.kill(group.proc.pid, sig)
            return True

    def step(self, now: float) -> list[int]:
        """Reap: report PID 1 exits (the rest of that container dies with it); escalate stops."""
        exited: list[int] = []
        with self._lock:
            for instance_id, group in list(self._live.items()):
                if group.proc.poll() is not None:
                    _end_group(group)
                    self._remove_cgroup(group.cgroup)
                    del self._live[instance_id]
                    exited.append(instance_id)
            for instance_id, groups in list(self._dying.items()):
                remaining = [g for g in groups if not self._settle(g)]
                if remaining:
                    self._dying[instance_id] = remaining
                else:
                    del self._dying[instance_id]
            if self._cgroups_left:
                self._cgroups_left = [c for c in self._cgroups_left if not _rmdir_cgroup(c, 1)]
        return exited

    def _settle(self, group: _Group) -> bool:
        """True when a stopping container is gone; KILL it once its grace has run out."""
        if group.proc.poll() is not None and not _members(group):
            _kill_marked(group.marker)
            self._remove_cgroup(group.cgroup)
            return True
        if group.kill_at is not None and time.monotonic() >= group.kill_at:
            _end_group(group)
            self._remove_cgroup(group.cgroup)
            return True
        return False

    def _kill_live(self, instance_id: int) -> None:
        group = self._live.pop(instance_id, None)
        if group is not None:
            _end_group(group)
            self._remove_cgroup(group.cgroup)

    # -- cgroups ------------------------------------------------------------------------------

    def cgroup(self, instance_id: int) -> Path | None:
        """The CPU-accounting cgroup directory of the instance's running container, if any."""
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.cgroup

    def _make_cgroup(self, name: str) -> Path | None:
        if self._cgroup_base is None:
            return None
        path = self._cgroup_base / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if not self._cgroup_warned:
                self._cgroup_warned = True
                log.warning("vastsim: containers run without a cgroup of their own (%s)", exc)
            return None
        return path

    def _remove_cgroup(self, path: Path | None) -> None:
        """Remove an ended container's cgroup (killing what is still in it); retried in `step`
        and `shutdown` while the kernel still counts a process in it."""
        if path is not None and not _rmdir_cgroup(path) and path not in self._cgroups_left:
            self._cgroups_left.append(path)

    def next_wakeup(self) -> float | None:
        return None

    def logs(self, instance_id: int) -> str:
        try:
            return self.log_path(instance_id).read_text("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def pid(self, instance_id: int) -> int | None:
        """PID 1 of the instance's running container, as the host numbers it."""
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.proc.pid

    def boot(self, instance_id: int) -> int | None:
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.boot

    def pids(self, instance_id: int) -> list[int]:
        """Every live process of the instance's containers (running and stopping), host pids."""
        with self._lock:
            return sorted(p for g in self._groups(instance_id) for p in _members(g))

    def host_pid(self, instance_id: int, pid: int) -> int | None:
        """The host's pid of the live process the instance's container sees as `pid` (the same
        number without namespaces)."""
        with self._lock:
            for group in self._groups(instance_id):
                members = _members(group)
                if group.namespace is None:
                    if pid in members or pid in marked_pids(group.marker):
                        return pid
                    continue
                for member in members:
                    if _pid_inside(member) == pid:
                        return member
            return None

    def _groups(self, instance_id: int) -> list[_Group]:
        groups = list(self._dying.get(instance_id, []))
        live = self._live.get(instance_id)
        if live is not None:
            groups.append(live)
        return groups

    def shutdown(self) -> None:
        with self._lock:
            for instance_id in set(self._live) | set(self._dying):
                self.destroy(instance_id, 0.0)
            for kept in Path(tempfile.gettempdir()).glob(f"vastsim-{self._token}-*"):
                shutil.rmtree(kept, ignore_errors=True)  # stopped containers' own
            deadline = time.monotonic() + 5.0
            while self._cgroups_left and time.monotonic() < deadline:
                self._cgroups_left = [c for c in self._cgroups_left if not _rmdir_cgroup(c)]
                if self._cgroups_left:
                    time.sleep(0.02)
            for path in self._cgroups_left:
                log.warning("vastsim: could not remove the cgroup %s", path)
            if self._cgroup_base is not None:
                with contextlib.suppress(OSError):  # another runner's containers may be in it
                    self._cgroup_base.rmdir()


def command(spec: ContainerSpec) -> list[str]:
    """argv of PID 1 (see the module docstring)."""
    if spec.runtype.strip() == "args":
        entry: list[str] = []
        if spec.onstart and spec.onstart.strip():
            try:
                entry = shlex.split(spec.onstart)
            except ValueError:
                entry = [spec.onstart]
        argv = entry + list(spec.args or ())
        return argv or ["sh", "-c", IDLE]
    script = (spec.onstart or "").strip()
    return ["sh", "-c", f"{script}\n{IDLE}" if script else IDLE]


# -- namespaces -------------------------------------------------------------------------------

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
        proc = _popen_contained(
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


def _popen(
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
        preexec_fn=None if procs is None else _enter_cgroup(procs),  # noqa: PLW1509
    )


def _enter_cgroup(procs: int) -> Callable[[], None]:
    """The pre-exec step that moves the child into a cgroup: "0" written to `cgroup.procs` is
    the writer itself (v1 and v2). One write to an fd opened before the fork: nothing that could
    take a lock in the forked child; a failure leaves the container outside, never unstarted."""

    def enter() -> None:
        with contextlib.suppress(OSError):
            os.write(procs, b"0")

    return enter


def _popen_contained(
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str],
    out: IO[bytes] | int,
    procs: int | None = None,
) -> subprocess.Popen[bytes]:
    """`_popen` as PID 1 of a new PID namespace (see the module docstring). The thread that
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
            started.append(_popen([_unshare_tool[0], *SHIM, *argv], cwd, env, out, procs))
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


def _namespace(pid: int) -> str | None:
    """The PID namespace of a live process ("pid:[4026532177]"), None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_pids(namespace: str) -> list[int]:
    """Live processes of a PID namespace, host pids, from /proc (a zombie has no namespace)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _namespace(int(entry)) == namespace:
            found.append(int(entry))
    return found


def _pid_inside(pid: int) -> int | None:
    """The pid of a process in its own (innermost) PID namespace, from /proc/<pid>/status."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def _members(group: _Group) -> list[int]:
    """The live processes of one container: its namespace's, or (fallback) its group's."""
    if group.namespace is None:
        return group_pids(group.proc.pid)
    if group.proc.poll() is not None:
        return []  # PID 1 reaped: the kernel has ended the namespace (its id may be reused)
    return namespace_pids(group.namespace)


# -- process groups and markers ---------------------------------------------------------------


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


def _killpg(pgid: int, sig: int) -> None:
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


def _kill_marked(prefix: str) -> None:
    for pid in marked_pids(prefix):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _end_group(group: _Group) -> None:
    """SIGKILL the container and reap PID 1. In a PID namespace that is all: PID 1 is reaped only
    once the kernel has ended every other process of the namespace; then one marker sweep. In
    the fallback: the group and the strays that left it, until none is left."""
    proc = group.proc
    _killpg(proc.pid, signal.SIGKILL)
    if group.namespace is not None:
        proc.send_signal(signal.SIGKILL)  # PID 1 itself, should it have left its group
    else:
        _kill_marked(group.marker)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if group.namespace is not None and proc.returncode is not None:
        _kill_marked(group.marker)
        return
    deadline = time.monotonic() + 5.0
    while (group_pids(proc.pid) or marked_pids(group.marker)) and time.monotonic() < deadline:
        _killpg(proc.pid, signal.SIGKILL)
        _kill_marked(group.marker)
        time.sleep(0.01)


# -- CPU-accounting cgroups -------------------------------------------------------------------

CGROUP_DIR = "vastsim"
_cgroup_lock = threading.Lock()
_cgroup_probed: list[Path | None] = []


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


def _open_procs(cgroup: Path | None) -> int | None:
    if cgroup is None:
        return None
    try:
        return os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None


def cgroup_pids(cgroup: Path) -> list[int]:
    """The processes in a cgroup (host pids), from its `cgroup.procs`."""
    try:
        text = (cgroup / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split() if p.isdigit()]


def _rmdir_cgroup(cgroup: Path, attempts: int = 50) -> bool:
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
