"""The cluster's Ray head, run by ray-vast as a detached `ray start --head --block` group.

The GCS runs with token auth (`RAY_AUTH_MODE=token`, the token in a 0600 file), so finding its
port is not enough to join. The dashboard and Jobs API answer on `head.dashboard_port` behind the
same token (issue 24: `ray job submit` from the user's machine). ray-vast is the head's autoscaler:
it runs with autoscaler v2's state in the GCS (`RAY_enable_autoscaler_v2`) and without Ray's own
monitor (`--no-monitor`), which knows none of ray-vast's node types and would tell every driver
that a demand ray-vast is renting for is infeasible; ray-vast reports its launches to the GCS
instead (`watch/rayreport.py`), and `ray status` shows them, and tells the drivers only the demand
no node type can serve (`watch/rayevents.py`).

It is stopped by process group, never with `ray stop` (which ends every Ray process on the
machine). Ready means the log says "Ray runtime started.": a SIGTERM
before that is handled only ~30 s later (reference ray.md section 3).
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.embedded import processes
from reconciler.model.raystart import RAY_NODE_ENV

READY_LINE = "Ray runtime started."
# Quick stops and prompt failure detection; the drain would hold a head's stop for 30 s.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_AUTH_MODE": "token",
    # `ray status` reads the autoscaling state ray-vast reports (autoscaler v2's), not the v1
    # monitor's status string; request_resources() goes to the GCS's cluster constraints.
    "RAY_enable_autoscaler_v2": "1",
    **RAY_NODE_ENV,
}


@dataclass(frozen=True)
class RayHead:
    address: str
    pid: int


def _name(cluster: str) -> str:
    return f"ray-head-{cluster}"


def temp_dir(state_dir: Path, cluster: str) -> Path:
    """Short: Ray puts unix sockets under it, and their paths are limited to ~107 bytes."""
    tag = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"rv-{tag}-{cluster[:12]}"


def running(state_dir: Path, cluster: str) -> RayHead | None:
    found = processes.records(state_dir).get(_name(cluster))
    if found is None or not processes.alive(found.pid):
        return None
    return RayHead(str(found.info["address"]), found.pid)


def start(
    state_dir: Path,
    cluster: str,
    *,
    port: int,
    token_path: Path,
    env: Mapping[str, str],
    extra_env: Mapping[str, str] | None = None,
    dashboard: tuple[str, int] | None = None,
    on_gcs: Callable[[], None] | None = None,
) -> RayHead:
    """The cluster's Ray head, started if it is not running, and ready (its GCS, its runtime
    and its dashboard answer). No CPUs: work goes to workers. `dashboard`: the host and port
    Ray's dashboard and Jobs API listen on (None: none). `on_gcs` is called once the GCS takes
    connections, seconds before the rest is up: workers can join from then on, so `up` rents
    while the head finishes starting. The head is recorded as soon as it is spawned, so a head
    that never gets ready is still found and stopped by `down`."""
    current = running(state_dir, cluster)
    if current is not None:
        return current
    ray = str(Path(sys.executable).with_name("ray"))
    root = temp_dir(state_dir, cluster)
    log = state_dir / "ray" / f"{cluster}-head.log"
    argv = [
        ray,
        "start",
        "--head",
        "--block",
        f"--port={port}",
        "--num-cpus=0",
        *_dashboard_args(dashboard),
        "--no-monitor",
        "--disable-usage-stats",
        f"--temp-dir={root}",
        "--object-store-memory=100000000",
        "--labels=rv_role=head",
    ]
    full = {**env, **RAY_ENV, **(extra_env or {}), "RAY_AUTH_TOKEN_PATH": str(token_path)}
    full.pop("RAY_AUTH_TOKEN", None)
    proc = processes.spawn(argv, env=full, log=log)
    host = _local_address()
    processes.remember(
        state_dir, processes.Started(_name(cluster), proc.pid, {"address": f"{host}:{port}"})
    )
    processes.wait_for_port(host, port, proc, timeout=120, log=log)
    if on_gcs is not None:
        on_gcs()
    processes.wait_for_line(log, READY_LINE, proc, timeout=120)
    if dashboard is not None:  # ready means `ray job submit` works, not only the GCS
        dash_host, dash_port = dashboard
        reach = "127.0.0.1" if dash_host in ("0.0.0.0", "::") else dash_host  # noqa: S104
        processes.wait_for_port(reach, dash_port, proc, timeout=120, log=log)
    return RayHead(f"{host}:{port}", proc.pid)


def _dashboard_args(dashboard: tuple[str, int] | None) -> list[str]:
    """Ray's dashboard on its host and port; its agent on the head, and the Ray Client server
    that ray[default] starts, listen on free ports (two clusters' heads on one machine would both
    take Ray's defaults 52365 and 10001)."""
    agent, client = free_ports(2)
    clients = [f"--ray-client-server-port={client}"] if _has_grpc() else []
    if dashboard is None:
        return ["--include-dashboard=false", *clients]
    host, port = dashboard
    return [
        "--include-dashboard=true",
        f"--dashboard-host={host}",
        f"--dashboard-port={port}",
        f"--dashboard-agent-listen-port={agent}",
        *clients,
    ]


def _has_grpc() -> bool:
    """Whether Ray will start its client server (it does when grpcio is importable; the flag
    for its port is an error without it)."""
    return importlib.util.find_spec("grpc") is not None


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing listens on now, the kernel's choice (held open together
    while they are chosen, so no two are the same; the agent has its own copy, as it imports
    nothing of ray-vast's: agent/raynode.py)."""
    probes = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(p.getsockname()[1]) for p in probes]
    finally:
        for probe in probes:
            probe.close()


def stop(state_dir: Path, cluster: str) -> bool:
    found = processes.records(state_dir).get(_name(cluster))
    if found is None:
        return False
    processes.stop_group(found.pid, grace=15.0)
    processes.forget(state_dir, _name(cluster))
    # the head's Ray session files (sockets, Ray's own logs) go with it, as its machines do:
    # nothing else removes them (every `up` of another state directory left its own in /tmp)
    shutil.rmtree(temp_dir(state_dir, cluster), ignore_errors=True)
    return True


def _local_address() -> str:
    """What Ray itself would pick: the routable address, or 127.0.0.1 in a loopback-only netns."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 53))  # no packet is sent for a UDP connect
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def driver_env(token_path: Path) -> dict[str, str]:
    """What a Ray driver (or `ray status`) needs to talk to this head."""
    return {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
    }
