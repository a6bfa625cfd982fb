"""`down` through the real command with a Ray head on record: declined, the head still runs and
nothing is destroyed; approved, the head is stopped and the instances destroyed (issue 14).

The "Ray head" is a stand-in process recorded where `ray-vast up` records the real one, so the
command's own wiring (the head found, stopped only after the confirmation) is what is tested,
without starting Ray.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from reconciler.embedded import processes
from tests.served import LOCAL_SIM, World


@pytest.fixture
def ray_head(world: World) -> Iterator[subprocess.Popen[bytes]]:
    log = world.state_dir / "ray" / "local-sim-head.log"
    proc = processes.spawn([sys.executable, "-c", "import time; time.sleep(300)"], env={}, log=log)
    processes.remember(
        world.state_dir,
        processes.Started("ray-head-local-sim", proc.pid, {"address": "127.0.0.1:6379"}),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_a_declined_down_leaves_the_ray_head_and_the_instances(
    world: World, ray_head: subprocess.Popen[bytes]
) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    rented = set(world.sim.instances)
    assert rented

    declined = world.run("down", "local-sim")  # no terminal, no --auto-approve
    assert declined.returncode == 1
    assert "down needs approval" in declined.stderr
    assert f"will stop the Ray head of local-sim at 127.0.0.1:6379 (pid {ray_head.pid})" in (
        declined.stdout
    )
    assert ray_head.poll() is None, "a declined down stopped the Ray head"
    assert set(world.sim.instances) == rented
    assert "ray-head-local-sim" in processes.records(world.state_dir)

    gone = world.run("down", "local-sim", "--auto-approve")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert "Ray head of local-sim stopped." in gone.stdout
    assert gone.stdout.index("Ray head of local-sim stopped.") < gone.stdout.index(
        ": destroy: instance"
    )
    assert ray_head.wait(timeout=20) is not None
    assert world.sim.instances == {}
    assert "ray-head-local-sim" not in processes.records(world.state_dir)
