"""Issue 14, containers that contain: after `ray-vast up examples/clusters/local-sim.yaml` and
`down`, no Ray process of the cluster is left, neither the head's nor the worker's.

The worker's Ray runs in its container's PID namespace (as on vast), so it ends with the
container whatever it did: Ray starts `ray::DashboardAgent` and `ray::RuntimeEnvAgent` with
`setsid`, and their process titles overwrite part of their environment, so neither a process
group nor an environment marker is sure to find them.

A process is the cluster's when its command line or environment names the state directory or
the head's Ray directory, its working directory is under the state directory (the containers'
workspaces are), or one of its open files is under either (Ray's logs). Ray processes that are
not tied to this test are not counted: other test runs on this machine have their own Ray.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.embedded import rayhead
from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import UpCluster
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

CLUSTER = "local-sim"
WORKER_RAY = ("raylet", "ray::DashboardAgent", "ray::RuntimeEnvAgent")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(b")", 1)[-1].split()[0] != b"Z"


def _open_files(pid: int) -> list[str]:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    return [_link(f"/proc/{pid}/fd/{fd}") for fd in fds]


def cluster_processes(state: Path, head_dir: Path) -> list[int]:
    """Live processes tied to this test's cluster (see the module docstring), from /proc."""
    places = (str(state), str(head_dir))
    needles = [p.encode() for p in places]
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        seen = _read(f"/proc/{pid}/cmdline") + _read(f"/proc/{pid}/environ")
        tied = (
            any(n in seen for n in needles)
            or _link(f"/proc/{pid}/cwd").startswith(f"{state}/")
            or any(f.startswith(tuple(f"{p}/" for p in places)) for f in _open_files(pid))
        )
        if tied and _alive(pid):
            found.append(pid)
    return sorted(found)


def cmdline(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        where = f"{_link(f'/proc/{pid}/ns/pid')} cwd={_link(f'/proc/{pid}/cwd')}"
        lines.append(f"{pid} {where}: {cmdline(pid)[:160]}")
    return "\n".join(lines)


def test_up_then_down_leaves_no_ray_process(upped: UpCluster) -> None:
    up = upped()
    state = up.state
    head_dir = rayhead.temp_dir(state, CLUSTER)
    containers = state / "vastsim" / "containers"
    wait_for(up.worker_in_ray_status, 180, "a worker in `ray status`", every=2)

    def worker_ray() -> list[int]:
        """The worker's raylet and agents (in a container: their working directory is its),
        once all three are up (the agents start a little after the raylet)."""
        pids = [
            p
            for p in cluster_processes(state, head_dir)
            if _link(f"/proc/{p}/cwd").startswith(f"{containers}/")
            and any(name in cmdline(p) for name in WORKER_RAY)
        ]
        every = all(any(name in cmdline(p) for p in pids) for name in WORKER_RAY)
        return pids if every else []

    seen = wait_for(worker_ray, 60, "the worker's raylet, dashboard agent, runtime env agent")
    # ...and run in a PID namespace of their own: the container's, which they end with
    namespaces = {_link(f"/proc/{p}/ns/pid") for p in seen}
    assert _link("/proc/self/ns/pid") not in namespaces, describe(seen)
    assert len(namespaces) == 1, describe(seen)
    said = up.stop()
    down = up.down(CLUSTER)
    assert down.returncode == 0, said[-3000:] + down.stdout + down.stderr
    assert "Embedded vastsim stopped." in down.stdout
    try:
        # the head's stop escalates to KILL after 15 s; the containers are gone when down returns
        wait_for(lambda: cluster_processes(state, head_dir) == [], 30, "no process of the cluster")
    except AssertionError:
        raise AssertionError(
            "left after down:\n" + describe(cluster_processes(state, head_dir))
        ) from None
    # nor its Ray session files (each `up` of a new state directory left ~200 KB in /tmp)
    assert not head_dir.exists(), sorted(str(p) for p in head_dir.iterdir())
