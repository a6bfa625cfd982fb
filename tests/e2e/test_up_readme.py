"""The README's first command: `ray-vast up examples/clusters/local-sim.yaml` brings up a cluster
whose Ray worker shows in `ray status` of the local head and runs a task; `down` ends it all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.live import describe, leftover_processes, wait_for
from reconciler.embedded import rayhead
from tests.e2e.test_live_seed import loopback_only

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
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


def test_up_then_ray_status_then_a_task_then_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAST_", "RAY_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reconciler",
            "up",
            "examples/clusters/local-sim.yaml",
            "--state-dir",
            str(state),
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        token = state / "pki" / "local-sim" / "ray-auth-token"
        ray_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}

        def worker_in_ray_status() -> str | None:
            if not token.exists():
                return None
            shown = subprocess.run(
                [RAY, "status", "--address", "127.0.0.1:6380"],
                env=ray_env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            return shown.stdout if "rv-slot-" in shown.stdout else None

        try:
            status = wait_for(worker_in_ray_status, 180, every=2)
        except AssertionError:
            up.terminate()
            log = state / "ray" / "local-sim-head.log"
            head = log.read_text()[-2000:] if log.exists() else "(no head log)"
            raise AssertionError(
                f"up said:\n{up.communicate(timeout=60)[0][-4000:]}\n{head}"
            ) from None
        assert "Active:" in status
        ran = subprocess.run(
            [sys.executable, "-c", TASK],
            env=ray_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert "RAN ON 2000000" in ran.stdout, ran.stdout + ran.stderr
        _no_child_holds_the_key(state, exclude=up.pid)
        _ray_reads_work_and_drains_the_node(ray_env)
    except BaseException:
        # a failure above must still end what up started: down, then the original error
        up.terminate()
        up.communicate(timeout=60)
        _down(state, env)
        raise
    up.terminate()
    out, _ = up.communicate(timeout=60)
    assert "watch stopped" in out
    down = _down(state, env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "Embedded vastsim stopped." in down.stdout
    head_dir = str(rayhead.temp_dir(state, "local-sim"))
    for marker in (str(state), head_dir):
        try:
            wait_for(lambda m=marker: leftover_processes(m) == [], 60)
        except AssertionError:
            raise AssertionError(describe(leftover_processes(marker))) from None


def _down(state: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "down",
            "local-sim",
            "--auto-approve",
            "--state-dir",
            str(state),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
