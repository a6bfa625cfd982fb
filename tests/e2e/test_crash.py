"""A crash at any persistence point of an apply leaves nothing billing without a record.

The executor runs as a real process and SIGKILLs itself at point N (each state save, and each
provider mutation right after vast answered); then `apply` runs again and `down` ends the cluster.
vastsim's meter must show no instance left, and every instance that ever existed must have a line
in the ledger.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.served import LOCAL_SIM, ROOT, World

DRIVER = Path(__file__).with_name("crash_driver.py")
POINTS = 9


def crash_run(world: World, point: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DRIVER), str(world.state_dir), str(LOCAL_SIM), str(point)],
        env={**world.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def count_points(world: World) -> int:
    done = crash_run(world, 10_000)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.rsplit("POINTS ", 1)[1].split()[0])


def test_a_clean_apply_has_persistence_points(world: World) -> None:
    # the new state's first save, the plan's bookkeeping, then per rent: the pending create,
    # the create call, the saved instance id, and last the specs applied (for `status` with no
    # spec directory): 2 + 3 x 2 + 1 = 9
    assert count_points(world) == POINTS
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0


@pytest.mark.parametrize("point", range(1, POINTS + 1))
def test_crash_then_apply_then_down_leaves_nothing(world: World, point: int) -> None:
    crashed = crash_run(world, point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    again = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Took over the state lock" in again.stderr  # the killed apply's lock (issue 14)
    gone = world.run("down", "local-sim", "--auto-approve")
    assert gone.returncode == 0, gone.stdout + gone.stderr

    assert world.sim.instances == {}, "an instance is still billing"
    ever = set(world.sim.meter.instance_ids())
    assert ever, "nothing was ever rented"
    ledger = [
        json.loads(line) for line in (world.state_dir / "ledger.jsonl").read_text().splitlines()
    ]
    in_ledger = {entry["instance"] for entry in ledger if entry["instance"] is not None}
    assert ever <= in_ledger, f"instances with no ledger line: {ever - in_ledger}"
