"""End to end against a served vastsim: plan, apply, status, down, through the real command."""

from __future__ import annotations

import json

from tests.served import API_KEY, LOCAL_SIM, World


def test_plan_apply_status_down(world: World) -> None:
    planned = world.run("plan", str(LOCAL_SIM), "--detailed-exitcode")
    assert planned.returncode == 2, planned.stderr
    assert "Plan: 2 to rent." in planned.stdout
    assert world.sim.instances == {}  # plan changes nothing at vast

    applied = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert applied.returncode == 0, applied.stderr
    assert "Apply complete! 2 rent." in applied.stdout
    labels = world.labels()
    assert len(labels) == 2
    state = json.loads((world.state_dir / "state.json").read_text())
    lineage8 = state["lineage"][:8]
    assert all(label.startswith(f"rv.local-sim.{lineage8}.i") for label in labels)

    shown = world.run("status", str(LOCAL_SIM), "--json")
    view = json.loads(shown.stdout)
    (cluster,) = view["clusters"]
    expected = sum(i.dph_total for i in world.sim.instances.values())
    assert cluster["dollars_per_hour"] == round(expected, 4)
    assert {i["vast_id"] for i in cluster["instances"]} == set(world.sim.instances)

    again = world.run("plan", str(LOCAL_SIM), "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout

    declined = world.run("down", "local-sim")  # no terminal, no --auto-approve
    assert declined.returncode == 1
    assert "down needs approval" in declined.stderr
    assert set(world.sim.instances) == {i["vast_id"] for i in cluster["instances"]}

    gone = world.run("down", "local-sim", "--auto-approve")
    assert gone.returncode == 0, gone.stderr
    assert world.sim.instances == {}
    for text in (planned.stdout, applied.stdout, shown.stdout, gone.stdout, gone.stderr):
        assert API_KEY not in text
    for name in ("state.json", "ledger.jsonl"):
        assert API_KEY not in (world.state_dir / name).read_text()
        assert (world.state_dir / name).stat().st_mode & 0o777 == 0o600


def test_failed_listing_plans_nothing_and_exits_1(world: World) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    before = dict(world.sim.instances)
    world.sim.faults.fail_listing(page=1, status=500, count=20)
    planned = world.run("plan", str(LOCAL_SIM), "--json", "--detailed-exitcode")
    assert planned.returncode == 1
    payload = json.loads(planned.stdout)
    assert payload["errored"] and payload["actions"] == []
    applied = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert applied.returncode == 1
    assert "listing is unknown" in applied.stdout
    assert set(world.sim.instances) == set(before)


def test_apply_without_terminal_refuses_rather_than_hangs(world: World) -> None:
    applied = world.run("apply", str(LOCAL_SIM))
    assert applied.returncode == 1
    assert "no terminal to ask on" in applied.stderr
    assert world.sim.instances == {}


def test_bad_spec_changes_nothing(world: World, tmp_path: object) -> None:
    bad = world.state_dir.parent / "bad.yaml"
    bad.write_text(LOCAL_SIM.read_text().replace("max_workers: 2", "max_workers: zero"))
    applied = world.run("apply", str(bad), "--auto-approve")
    assert applied.returncode == 1
    assert "bad.yaml:" in applied.stderr and "max_workers" in applied.stderr
    assert world.sim.instances == {}
    assert not (world.state_dir / "state.json").exists()


def test_status_with_no_spec_directory_knows_what_was_last_applied(world: World) -> None:
    """The README's "other terminal" `status`: the specs come from the state's records, so a
    worker that min_workers keeps shows no stop time that never comes, and the cap is known."""
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    with_specs = json.loads(world.run("status", str(LOCAL_SIM), "--json").stdout)
    without = world.run("status", "--json")
    assert without.returncode == 0, without.stderr
    (mine,), (theirs,) = with_specs["clusters"], json.loads(without.stdout)["clusters"]
    assert theirs["cap_dollars_per_hour"] == mine["cap_dollars_per_hour"] == 1.0
    # what the specs decide, the same whether they come from the directory or the records (vast's
    # status and the age move on between the two calls: the served vastsim runs in real time)
    timeless = [_spec_said(i) for i in mine["instances"]]
    assert [_spec_said(i) for i in theirs["instances"]] == timeless
    assert any(i["kept_at_min_workers"] for i in timeless) or all(
        i["role"] == "candidate" for i in mine["instances"]
    )


MOVING = ("age_seconds", "vast_status", "phase", "role", "sample_at", "sample_busy")


def _spec_said(instance: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in instance.items() if k not in MOVING}


def test_a_watch_started_after_down_holds_the_cluster_down_until_it_is_applied(
    world: World,
) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0
    watched = world.run("watch", str(LOCAL_SIM), "--once")
    assert watched.returncode == 0, watched.stderr
    assert "held down by `ray-vast down`" in watched.stdout + watched.stderr
    assert world.sim.instances == {}  # an unchanged spec is not rented back
    shown = world.run("status", str(LOCAL_SIM))
    assert "held down by `ray-vast down` since" in shown.stdout, shown.stdout
    planned = world.run("plan", str(LOCAL_SIM))
    assert "applying this plan brings it back" in planned.stdout, planned.stdout
    again = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert again.returncode == 0 and "Apply complete! 2 rent." in again.stdout, again.stdout
    assert "held_down_at" in world.run("status", str(LOCAL_SIM), "--json").stdout
    shown = world.run("status", str(LOCAL_SIM))
    assert "held down" not in shown.stdout
