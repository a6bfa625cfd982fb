"""Saved plans are applied exactly or refused as stale; one writer at a time, across processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from tests.served import LOCAL_SIM, ROOT, World


def test_saved_plan_is_applied_exactly(world: World) -> None:
    plan_file = world.state_dir.parent / "ci.plan"
    planned = world.run("plan", str(LOCAL_SIM), "-out", str(plan_file))
    assert planned.returncode == 0, planned.stderr
    assert "Saved the plan to:" in planned.stdout
    assert plan_file.stat().st_mode & 0o777 == 0o600
    offers = [
        line.split()[2].rstrip(":") for line in planned.stdout.splitlines() if "+ offer" in line
    ]
    applied = world.run("apply", str(plan_file))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rented = sorted(str(i.offer_id) for i in world.sim.instances.values())  # type: ignore[attr-defined]
    assert rented == sorted(offers)


def test_saved_plan_refused_after_state_moved_on(world: World) -> None:
    plan_file = world.state_dir.parent / "ci.plan"
    assert world.run("plan", str(LOCAL_SIM), "-out", str(plan_file)).returncode == 0
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    count = len(world.sim.instances)
    stale = world.run("apply", str(plan_file))
    assert stale.returncode == 3  # stale, told apart from an error (1)
    assert "Saved plan is stale" in stale.stderr
    assert len(world.sim.instances) == count


def test_saved_plan_refused_after_spec_changed(world: World) -> None:
    spec = world.state_dir.parent / "c.yaml"
    spec.write_text(LOCAL_SIM.read_text())
    plan_file = world.state_dir.parent / "ci.plan"
    assert world.run("plan", str(spec), "-out", str(plan_file)).returncode == 0
    spec.write_text(LOCAL_SIM.read_text().replace("max_workers: 2", "max_workers: 3"))
    stale = world.run("apply", str(plan_file))
    assert stale.returncode == 3  # stale, told apart from an error (1)
    assert "specs changed" in stale.stderr
    assert world.sim.instances == {}


def test_saved_plan_refused_after_its_instances_changed(world: World) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    victim = min(world.sim.instances)
    world.sim.faults.exit_instance(victim)
    plan_file = world.state_dir.parent / "ci.plan"
    planned = world.run("plan", str(LOCAL_SIM), "-out", str(plan_file))
    assert "will be destroyed" in planned.stdout, planned.stdout
    world.sim.faults.change_ip(victim)
    stale = world.run("apply", str(plan_file))
    assert stale.returncode == 3  # stale, told apart from an error (1)
    assert "live instances it acts on changed" in stale.stderr
    assert victim in world.sim.instances


HOLD_LOCK = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from reconciler.clock import SystemClock
    from reconciler.state.filestore import FileStore
    store = FileStore(Path(sys.argv[1]), clock=SystemClock())
    info = store.lock("watch")
    print(info.id, flush=True)
    sys.stdin.readline()
    store.unlock()
    """
)


def test_second_writer_is_refused_with_the_holders_details(world: World) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(world.state_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            lock_id = holder.stdout.readline().strip()
            refused = world.run("apply", str(LOCAL_SIM), "--auto-approve")
            assert refused.returncode == 1
            assert lock_id in refused.stderr
            assert f"PID:       {holder.pid}" in refused.stderr
            assert "Operation: watch" in refused.stderr
            assert f"ray-vast state force-unlock {lock_id}" in refused.stderr
            assert world.sim.instances == {}
        finally:
            holder.stdin.write("\n")
            holder.stdin.flush()
            holder.wait(timeout=30)
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0


def _killed_holder(world: World, operation: str) -> tuple[str, int]:
    """A process that takes the lock for `operation` and is killed (SIGKILL) while holding it."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK.replace('"watch"', repr(operation)), str(world.state_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as holder:
        assert holder.stdout is not None
        lock_id = holder.stdout.readline().strip()
        holder.send_signal(signal.SIGKILL)
        assert holder.wait(timeout=30) == -signal.SIGKILL
    assert (world.state_dir / "state.lock").exists()
    return lock_id, holder.pid


def test_a_killed_owners_lock_is_taken_over_by_apply_and_by_down(world: World) -> None:
    _, apply_pid = _killed_holder(world, "apply")
    applied = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "Took over the state lock" in applied.stderr
    assert f"`apply` (pid {apply_pid} on " in applied.stderr
    assert len(world.sim.instances) == 2

    lock_id, down_pid = _killed_holder(world, "down")
    gone = world.run("down", "local-sim", "--auto-approve")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"`down` (pid {down_pid} on " in gone.stderr and lock_id in gone.stderr
    assert world.sim.instances == {}
    assert not (world.state_dir / "state.lock").exists()
    noted = world.run("ledger", "--class", "lock_taken_over", "--json")
    entries = [json.loads(line) for line in noted.stdout.splitlines()]
    assert [e["data"]["dead"]["pid"] for e in entries] == [apply_pid, down_pid]
