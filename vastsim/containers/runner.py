"""The process runner: each container is a local process tree with vast's environment, in a PID
namespace of its own.

`ProcessRunner` keeps the books (which container of which instance is live, which are stopping)
and composes the mechanisms of its sibling modules: PID namespaces (`pidns`), the fallback's
process groups and markers (`sweep`), CPU-accounting cgroups (`cgroups`), and what a container is
given to run (`entrypoint`). Each of those module docstrings tells its part.

stdout and stderr go to `<workdir>/<instance id>/container.log` (served by request_logs); the
container's working directory and `DATA_DIRECTORY` is `<workdir>/<instance id>/workspace`. Its
`TMPDIR` is a directory of its own (`tmpdir`), as a container has its own /tmp; the host's /tmp
stays visible, as the host's filesystem is the image here.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vastsim.containers.cgroups import Cgroups, open_procs
from vastsim.containers.entrypoint import HOST_NETWORK_ENV, RESERVED, command
from vastsim.containers.pidns import namespace, no_namespaces, pid_inside, popen, popen_contained
from vastsim.containers.protocol import ContainerSpec
from vastsim.containers.sweep import MARKER, end_group, kill_marked, killpg, marked_pids, members


@dataclass
class _Group:
    proc: subprocess.Popen[bytes]
    boot: int
    marker: str
    namespace: str | None  # PID 1's PID namespace ("pid:[...]"); None without namespaces
    cgroup: Path | None = None  # the container's CPU-accounting cgroup; None without one
    kill_at: float | None = None  # monotonic time to escalate a stop to SIGKILL

    def members(self) -> list[int]:
        return members(self.proc, self.namespace)

    def end(self) -> None:
        end_group(self.proc, self.marker, self.namespace)


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
        self._cgroups = Cgroups()

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
            cgroup = self._cgroups.make(f"{spec.instance_id}-{self._token}.{spec.boot}")
            procs = open_procs(cgroup)
            try:
                with open(self.log_path(spec.instance_id), "ab") as out:
                    if self.contained:
                        proc = popen_contained(argv, workspace, env, out, procs)
                        ns = namespace(proc.pid)
                    else:
                        proc = popen(argv, workspace, env, out, procs)
                        ns = None
            except BaseException:
                self._cgroups.remove(cgroup)
                raise
            finally:
                if procs is not None:
                    os.close(procs)
            group = _Group(proc, spec.boot, marker, ns, cgroup)
            self._live[spec.instance_id] = group

    def stop(self, instance_id: int, now: float) -> None:
        """docker stop: TERM to the group, KILL after `stop_grace` seconds (in `step`)."""
        with self._lock:
            group = self._live.pop(instance_id, None)
            if group is None:
                return
            killpg(group.proc.pid, signal.SIGTERM)
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
                group.end()
            kill_marked(f"{self._token}.{instance_id}.")
            for group in groups:
                self._cgroups.remove(group.cgroup)
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
                    group.end()
                    self._cgroups.remove(group.cgroup)
                    del self._live[instance_id]
                    exited.append(instance_id)
            for instance_id, groups in list(self._dying.items()):
                remaining = [g for g in groups if not self._settle(g)]
                if remaining:
                    self._dying[instance_id] = remaining
                else:
                    del self._dying[instance_id]
            self._cgroups.retry()
        return exited

    def _settle(self, group: _Group) -> bool:
        """True when a stopping container is gone; KILL it once its grace has run out."""
        if group.proc.poll() is not None and not group.members():
            kill_marked(group.marker)
            self._cgroups.remove(group.cgroup)
            return True
        if group.kill_at is not None and time.monotonic() >= group.kill_at:
            group.end()
            self._cgroups.remove(group.cgroup)
            return True
        return False

    def _kill_live(self, instance_id: int) -> None:
        group = self._live.pop(instance_id, None)
        if group is not None:
            group.end()
            self._cgroups.remove(group.cgroup)

    # -- what is running ----------------------------------------------------------------------

    def cgroup(self, instance_id: int) -> Path | None:
        """The CPU-accounting cgroup directory of the instance's running container, if any."""
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.cgroup

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
            return sorted(p for g in self._groups(instance_id) for p in g.members())

    def host_pid(self, instance_id: int, pid: int) -> int | None:
        """The host's pid of the live process the instance's container sees as `pid` (the same
        number without namespaces)."""
        with self._lock:
            for group in self._groups(instance_id):
                alive = group.members()
                if group.namespace is None:
                    if pid in alive or pid in marked_pids(group.marker):
                        return pid
                    continue
                for member in alive:
                    if pid_inside(member) == pid:
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
            self._cgroups.close()
