"""The process runner: each container is a local process group with vast's environment.

PID 1 of the container is the leader of a new session (`start_new_session`), so the whole
container can be signalled and killed as one process group, and nothing it starts outlives it.

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

Every process of a container carries `VASTSIM_CONTAINER=<runner>.<instance>.<boot>` in its
environment, so a process that left the group (`setsid`) is still found and killed with its
container.

stdout and stderr go to `<workdir>/<instance id>/container.log` (served by request_logs); the
container's working directory and `DATA_DIRECTORY` is `<workdir>/<instance id>/workspace`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vastsim.runners import ContainerSpec

IDLE = "exec sleep infinity"


MARKER = "VASTSIM_CONTAINER"


@dataclass
class _Group:
    proc: subprocess.Popen[bytes]
    boot: int
    marker: str
    kill_at: float | None = None  # monotonic time to escalate a stop to SIGKILL


class ProcessRunner:
    """Containers as local process groups (real time only)."""

    loopback_ips = True

    def __init__(
        self,
        workdir: str | Path,
        *,
        stop_grace: float = 10.0,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stop_grace = stop_grace
        self.base_env = dict(
            base_env
            if base_env is not None
            else {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        )
        self._token = secrets.token_hex(6)
        self._live: dict[int, _Group] = {}
        self._dying: dict[int, list[_Group]] = {}
        self._lock = threading.RLock()

    # -- ports --------------------------------------------------------------------------------

    def allocate_ports(self, instance_id: int, wanted: list[str]) -> dict[str, int]:
        """Free local ports, one per wanted container port (bound together so they differ)."""
        held: list[socket.socket] = []
        out: dict[str, int] = {}
        try:
            for key in wanted:
                kind = socket.SOCK_DGRAM if key.endswith("/udp") else socket.SOCK_STREAM
                sock = socket.socket(socket.AF_INET, kind)
                held.append(sock)
                sock.bind(("127.0.0.1", 0))
                out[key] = int(sock.getsockname()[1])
        finally:
            for sock in held:
                sock.close()
        return out

    # -- life cycle ---------------------------------------------------------------------------

    def instance_dir(self, instance_id: int) -> Path:
        return self.workdir / str(instance_id)

    def workspace(self, instance_id: int) -> Path:
        return self.instance_dir(instance_id) / "workspace"

    def log_path(self, instance_id: int) -> Path:
        return self.instance_dir(instance_id) / "container.log"

    def start(self, spec: ContainerSpec, now: float) -> None:
        workspace = self.workspace(spec.instance_id)
        workspace.mkdir(parents=True, exist_ok=True)
        env = {**self.base_env, "HOME": str(workspace), **spec.env}
        env["DATA_DIRECTORY"] = str(workspace)
        marker = f"{self._token}.{spec.instance_id}.{spec.boot}"
        env[MARKER] = marker
        with self._lock:
            self._kill_live(spec.instance_id)
            with open(self.log_path(spec.instance_id), "ab") as log:
                proc = subprocess.Popen(
                    command(spec),
                    cwd=workspace,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._live[spec.instance_id] = _Group(proc, spec.boot, marker)

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
        """Kill the whole process group at once and reap it."""
        with self._lock:
            groups = self._dying.pop(instance_id, [])
            live = self._live.pop(instance_id, None)
            if live is not None:
                groups.append(live)
            for group in groups:
                _end_group(group)
            _kill_marked(f"{self._token}.{instance_id}.")

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
                    del self._live[instance_id]
                    exited.append(instance_id)
            for instance_id, groups in list(self._dying.items()):
                remaining = [g for g in groups if not self._settle(g)]
                if remaining:
                    self._dying[instance_id] = remaining
                else:
                    del self._dying[instance_id]
        return exited

    def _settle(self, group: _Group) -> bool:
        """True when a stopping group is gone; KILL it once its grace has run out."""
        if group.proc.poll() is not None and not group_pids(group.proc.pid):
            _kill_marked(group.marker)
            return True
        if group.kill_at is not None and time.monotonic() >= group.kill_at:
            _end_group(group)
            return True
        return False

    def _kill_live(self, instance_id: int) -> None:
        group = self._live.pop(instance_id, None)
        if group is not None:
            _end_group(group)

    def next_wakeup(self) -> float | None:
        return None

    def logs(self, instance_id: int) -> str:
        try:
            return self.log_path(instance_id).read_text("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def pid(self, instance_id: int) -> int | None:
        """PID 1 of the instance's running container."""
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.proc.pid

    def boot(self, instance_id: int) -> int | None:
        with self._lock:
            group = self._live.get(instance_id)
            return None if group is None else group.boot

    def pids(self, instance_id: int) -> list[int]:
        """Every live process of the instance's containers (running and stopping)."""
        with self._lock:
            groups = list(self._dying.get(instance_id, []))
            live = self._live.get(instance_id)
            if live is not None:
                groups.append(live)
            return sorted(p for g in groups for p in group_pids(g.proc.pid))

    def shutdown(self) -> None:
        with self._lock:
            for instance_id in set(self._live) | set(self._dying):
                self.destroy(instance_id, 0.0)


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
    """SIGKILL the whole group (and strays that left it), reap PID 1, wait until none is left."""
    proc = group.proc
    _killpg(proc.pid, signal.SIGKILL)
    _kill_marked(group.marker)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 5.0
    while (group_pids(proc.pid) or marked_pids(group.marker)) and time.monotonic() < deadline:
        _killpg(proc.pid, signal.SIGKILL)
        _kill_marked(group.marker)
        time.sleep(0.01)
