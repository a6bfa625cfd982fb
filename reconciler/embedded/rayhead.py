"""The cluster's Ray head, run by ray-vast as a detached `ray start --head --block` group.

The GCS runs with token auth (`RAY_AUTH_MODE=token`, the token in a 0600 file), so finding its
port is not enough to join. It is stopped by process group, never with `ray stop` (which ends
every Ray process on the machine). Ready means the log says "Ray runtime started.": a SIGTERM
before that is handled only ~30 s later (reference ray.md section 3).
"""

from __future__ import annotations

import hashlib
import socket
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.embedded import processes

READY_LINE = "Ray runtime started."
# Quick stops and prompt failure detection; the drain would hold a head's stop for 30 s.
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_AUTH_MODE": "token",
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
) -> RayHead:
    """The cluster's Ray head, started if it is not running. No CPUs: work goes to workers."""
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
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={root}",
        "--object-store-memory=100000000",
        "--labels=rv_role=head",
    ]
    full = {**env, **RAY_ENV, **(extra_env or {}), "RAY_AUTH_TOKEN_PATH": str(token_path)}
    full.pop("RAY_AUTH_TOKEN", None)
    proc = processes.spawn(argv, env=full, log=log)
    processes.wait_for_line(log, READY_LINE, proc, timeout=120)
    address = f"{_local_address()}:{port}"
    processes.remember(state_dir, processes.Started(_name(cluster), proc.pid, {"address": address}))
    return RayHead(address, proc.pid)


def stop(state_dir: Path, cluster: str) -> bool:
    found = processes.records(state_dir).get(_name(cluster))
    if found is None:
        return False
    processes.stop_group(found.pid, grace=15.0)
    processes.forget(state_dir, _name(cluster))
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
