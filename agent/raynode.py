"""Ray on the worker: the `ray start` command from the enrollment answer, and its process group.

`ray start --block` runs in a new session, so its whole process group (raylet, agents, workers)
can be watched, and stopped by group, never with `ray stop` (which ends every Ray process on the
machine). Its environment is the container's, minus the secrets Ray's user code has no business
reading (the join token, the instance key), plus Ray's token auth (`RAY_AUTH_MODE=token` and the
token in a 0600 file named by `RAY_AUTH_TOKEN_PATH`) and the answer's variables
(`RAY_CLOUD_INSTANCE_ID`, how autoscaler v2 matches the node to its instance).

The node's address (`--node-ip-address`, what the node advertises and the head's Ray connects back
to) is the answer's `node_ip_address`, which is the public address the agent enrolled with
(`PUBLIC_IPADDR`); a container told its own source address (`VASTSIM_SOURCE_IP`, the simulator's
per-instance loopback address) advertises that one, which is the same address there.

When the command is the `ray` script of a Python the agent found (`rayversion.interpreter`), that
Python runs Ray's own `ray` entry point after a wait for the head (`HEAD_FIRST`): a worker's
`ray start` asks the GCS for the head node and, while the head's raylet has not registered yet,
asks again only every 2 s (Ray 2.60 `get_all_node_info_until_retrieved`), so a worker that enrolls
while the head is still starting (`up`'s first worker) joined up to 2 s after the head was there.
The wait asks every 50 ms, with Ray already imported, for at most 30 s; then Ray's start runs
unchanged (its own wait included), and any failure of the wait only leaves Ray's start to wait.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HIDDEN_FROM_RAY = ("CONTAINER_API_KEY", "RV_JOIN_TOKEN", "RV_CA_PEM")
# Ray's own label keys, and the variable through which an autoscaler sets them on a node
# (ray_constants.RAY_DEFAULT_LABEL_KEYS_PREFIX, LABELS_ENVIRONMENT_VARIABLE).
RAY_LABEL_PREFIX = "ray.io/"
RAY_OVERRIDE_LABELS = "RAY_OVERRIDE_LABELS"

HEAD_FIRST = """
import sys, time
from ray.scripts.scripts import main
try:
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest
    address = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--address=")][0]
    head = GetAllNodeInfoRequest.NodeSelector()
    head.is_head_node = True
    client, deadline = GcsClient(address=address), time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if client.get_all_node_info(
                timeout=2, node_selectors=[head], state_filter=GcsNodeInfo.GcsNodeState.ALIVE
            ):
                break
        except Exception:
            pass
        time.sleep(0.05)
except Exception:
    pass
sys.argv[0] = "ray"
sys.exit(main())
"""


@dataclass(frozen=True)
class RayPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)


def ray_plan(
    command: Sequence[str],
    ray: Mapping[str, Any],
    *,
    cpus: int,
    gpus: int,
    token_path: str,
    base_env: Mapping[str, str],
    node_ip: str | None = None,
    agent_ports: Sequence[int] = (),
    python: str | None = None,
) -> RayPlan:
    """The `ray start` of one worker (pure): everything from the enrollment answer's `ray`, but
    the node's address is `node_ip` when the container was told its own (see the docstring).
    `agent_ports`: four free ports of the container for Ray's dashboard agent (HTTP, gRPC), its
    metrics export and its runtime-env agent (Ray's default 52365 for the first is one port per
    machine: containers that share one, as vastsim's do, would all wait for it). `python`: the
    interpreter `command`'s `ray` script runs on (`HEAD_FIRST` in the module docstring)."""
    # `ray start --labels` refuses Ray's own ray.io/ keys; what Ray would have found itself
    # (the accelerator type, with no NVML in a simulation) is set as Ray's autoscalers set it
    own = {k: v for k, v in ray["labels"].items() if not k.startswith(RAY_LABEL_PREFIX)}
    rays = {k: v for k, v in ray["labels"].items() if k.startswith(RAY_LABEL_PREFIX)}
    labels = ",".join(f"{k}={v}" for k, v in sorted(own.items()))
    address = node_ip or ray["node_ip_address"]
    argv = [
        *_launcher(command, python),
        "start",
        "--block",
        f"--address={ray['head_address']}",
        f"--node-ip-address={address}",
        f"--node-manager-port={ray['node_manager_port']}",
        f"--object-manager-port={ray['object_manager_port']}",
        "--worker-port-list=" + ",".join(str(p) for p in ray["worker_ports"]),
        f"--num-cpus={cpus}",
        f"--num-gpus={gpus}",
        "--resources=" + json.dumps(dict(ray["resources"]), sort_keys=True),
        f"--labels={labels}",
        "--disable-usage-stats",
    ]
    if agent_ports:
        listen, grpc, metrics, runtime_env = agent_ports
        argv += [
            f"--dashboard-agent-listen-port={listen}",
            f"--dashboard-agent-grpc-port={grpc}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
        ]
    if base_env.get("TMPDIR"):
        # Ray's temp dir is the head's path unless a node names its own: a container told its
        # own TMPDIR keeps Ray's sockets and logs there (two containers on one machine, as
        # vastsim runs them, would otherwise share a session directory and race for its names)
        argv.append(f"--temp-dir={os.path.join(base_env['TMPDIR'], 'ray')}")
    env = {k: v for k, v in base_env.items() if k not in HIDDEN_FROM_RAY}
    env.update({str(k): str(v) for k, v in ray["env"].items()})
    if rays:
        env[RAY_OVERRIDE_LABELS] = json.dumps(rays, sort_keys=True)
    env["RAY_AUTH_MODE"] = str(ray.get("auth_mode", "token"))
    env["RAY_AUTH_TOKEN_PATH"] = token_path
    env.pop("RAY_AUTH_TOKEN", None)
    return RayPlan(tuple(argv), env)


def _launcher(command: Sequence[str], python: str | None) -> list[str]:
    """What runs `ray start`: `command` itself, or, for the plain `ray` script of a known Python,
    that Python running Ray's entry point after the wait for the head."""
    if python is None or len(command) != 1 or os.path.basename(command[0]) != "ray":
        return list(command)
    return [python, "-c", HEAD_FIRST]


def shown(argv: Sequence[str]) -> str:
    """A `ray start` command line as a log says it (the launcher's script not spelled out)."""
    if len(argv) > 2 and argv[1] == "-c" and argv[2] == HEAD_FIRST:
        return " ".join(["ray", *argv[3:]]) + f" (run by {argv[0]} once the head is up)"
    return " ".join(argv)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing listens on now, the kernel's choice (held open together
    while they are chosen, so no two are the same)."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("0.0.0.0", 0))  # noqa: S104 - only to learn a free port
        return [int(p.getsockname()[1]) for p in probes]
    finally:
        for probe in probes:
            probe.close()


def write_token(token: str) -> str:
    """The Ray auth token in a fresh 0600 file in a private directory; returns its path."""
    directory = tempfile.mkdtemp(prefix="rv-ray-")
    path = os.path.join(directory, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)
    return path


class RayProcess:
    """`ray start --block` in its own process group."""

    def __init__(self, plan: RayPlan) -> None:
        self.plan = plan
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            list(plan.argv),
            env=dict(plan.env),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def uptime(self) -> float:
        return time.monotonic() - self.started_at

    def stop(self, grace: float) -> None:
        """TERM the group, KILL it after `grace` seconds, reap the leader."""
        _signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(self.proc.pid):
            self.proc.poll()
            time.sleep(0.05)
        _signal_group(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)


def reap_orphans(keep: int | None) -> None:
    """As PID 1 the agent inherits every orphaned process of the container: reap the dead ones
    (zombies would count against the container's pid limit), leaving Ray's leader to its
    `Popen`, which wants its exit code."""
    while True:
        try:
            found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if found is None or found.si_pid == keep:
            return
        try:
            os.waitpid(found.si_pid, os.WNOHANG)
        except ChildProcessError:
            return


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
