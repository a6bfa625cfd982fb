"""The README's first command: `ray-vast up examples/clusters/local-sim.yaml` brings up a cluster
whose Ray worker shows in `ray status` of the local head and runs a task; `down` ends it all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.live import describe, leftover_processes
from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import ROOT, UpCluster
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

TASK = textwrap.dedent(
    """
    import os, ray
    ray.init(address="127.0.0.1:6380", log_to_driver=False)

    @ray.remote(num_cpus=1)
    def where():
        return os.environ["CONTAINER_ID"]

    print("RAN ON", ray.get(where.remote(), timeout=60))
    """
)


# Ray's view of the worker through the controller's own reader: idle once the task is done, then
# drained for idle termination (as the money chain's stop does): Ray takes the node out of
# scheduling.
RAY_VIEW = textwrap.dedent(
    """
    import time
    from reconciler.model.records import Records
    from reconciler.watch.raysignals import RaySignals
    signals = RaySignals("127.0.0.1:6380", "local-sim")
    work = {}
    for _ in range(60):  # the task's lease is returned within seconds
        work = signals.work(Records()) or {}
        if work and not any(work.values()):
            break
        time.sleep(0.5)
    print("WORK", sorted(work.items()))
    nodes = {r: n for n, r in signals._records_by_node().items()}
    print("ACCEPTED", signals.drain_idle(Records(), sorted(work), time.time() + 60))
    status = None
    for _ in range(60):
        by_node = {bytes(n.node_id).hex(): n.status for n in signals._state().node_states}
        status = by_node.get(nodes[sorted(work)[0]])
        if status in (2, 4):  # DEAD, DRAINING
            break
        time.sleep(0.5)
    print("DRAINED", status)
    """
)


def _no_child_holds_the_key(state: Path, *, exclude: int) -> None:
    """Issue 13: no process ray-vast started (the Ray head, the embedded simulator, containers,
    their Ray workers) has VAST_API_KEY in its environment."""
    pids = [p for p in leftover_processes(str(state)) if p != exclude]
    assert pids, "no process of the cluster found"
    holding = [p for p in pids if b"VAST_API_KEY=" in _environ(p)]
    assert holding == [], describe(holding)


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


def _ray_reads_work_and_drains_the_node(ray_env: dict[str, str]) -> None:
    shown = subprocess.run(
        [sys.executable, "-c", RAY_VIEW],
        cwd=ROOT,
        env=ray_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "WORK [('i" in shown.stdout and "False)]" in shown.stdout, shown.stdout + shown.stderr
    # Ray takes the node out of scheduling (DRAINING); an idle drained node's raylet then exits
    # (DEAD), as Ray's DrainNode does
    assert "DRAINED 4" in shown.stdout or "DRAINED 2" in shown.stdout, shown.stdout + shown.stderr


def test_up_then_ray_status_then_a_task_then_down(upped: UpCluster) -> None:
    up = upped()
    try:
        status = wait_for(up.worker_in_ray_status, 180, "a worker in `ray status`", every=2)
    except AssertionError:
        raise AssertionError(up.said()) from None
    assert "Active:" in status
    ray_env = up.ray_env()
    ran = subprocess.run(
        [sys.executable, "-c", TASK],
        env=ray_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "RAN ON 2000000" in ran.stdout, ran.stdout + ran.stderr
    _no_child_holds_the_key(up.state, exclude=up.proc.pid)
    _ray_reads_work_and_drains_the_node(ray_env)
    assert "watch stopped" in up.stop()
    down = up.down()
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Embedded vastsim stopped." in down.stdout
    up.nothing_left()


def test_down_from_another_terminal_while_up_runs_ends_everything(upped: UpCluster) -> None:
    """The README's other-terminal flow ends with `down` while `up` still runs in the first
    one: `up` (the state's one writer) carries the down out and stops once every cluster it
    runs is down; `down` then stops the Ray head and the embedded simulator. Before, the down
    was refused while `up` held the state."""
    up = upped()
    serving = wait_for(lambda: up.serving("local-sim"), 180, "a serving worker", every=1)
    assert serving
    down = up.down()
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Down complete: 1 instance(s) of local-sim destroyed." in down.stdout, down.stdout
    assert "Ray head of local-sim stopped." in down.stdout
    assert "Embedded vastsim stopped." in down.stdout
    assert up.proc.wait(timeout=60) == 0
    assert "every cluster is down (`ray-vast down`): up stops" in up.said()
    up.nothing_left()
