"""`ray-vast simulate`: the user's own specs on virtual time against a failure mix (the fleet
benchmark's, or a YAML of rates), printing dollars by cause beside vastsim's meter, waste
against the floor, false destroys and leaks; a simulated day of the examples in under a minute."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetsim.mix import FLEET_MIX, read_mix
from reconciler.cli import app
from tests.scenarios.world import cluster_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "clusters"


def simulate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def specs(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "a.yaml").write_text(cluster_text("a", min_workers=0, max_workers=3, factor=2))
    (folder / "b.yaml").write_text(cluster_text("b", min_workers=1, max_workers=2, factor=1))
    return folder


def as_json(*args: str) -> dict[str, Any]:
    code, out, err = simulate(*args, "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_simulated_day_of_the_examples_runs_to_its_end() -> None:
    """The figure (a day in about a minute here) is the simulate benchmark's to print; a test
    asserts no wall-clock time (a loaded CI machine took 71 s)."""
    started = time.perf_counter()
    code, out, err = simulate(str(EXAMPLES), "--hours", "24")
    print(f"a simulated day took {time.perf_counter() - started:.1f} s")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"simulate {EXAMPLES}: 3 cluster(s), 24 h of failures")
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("  ")}
    for name in ("local-sim", "rtx4090-pool", "train-and-prep", "total"):
        assert name in rows
    dollars, meter = float(rows["total"][2]), float(rows["total"][3])
    assert dollars == pytest.approx(meter, rel=0.01)
    for fate in ("stall", "boot", "dies", "net-drop", "orphan", "idle", "all"):
        assert fate in rows
    assert any(line.startswith("False destroys: ") and "Leaks: " in line for line in lines)


def test_json_and_the_same_seed_gives_the_same_dollars(tmp_path: Path) -> None:
    folder = specs(tmp_path)
    first = as_json(str(folder), "--hours", "2", "--seed", "4")
    second = as_json(str(folder), "--hours", "2", "--seed", "4")
    assert first["format_version"] == "1.1"
    assert first["scheduling"] is None  # one node type a cluster: nothing to choose
    assert first["hours"] == 2 and first["seed"] == 4 and first["mix"]["source"] is None
    assert [c["name"] for c in first["clusters"]] == ["a", "b"]
    for row in first["clusters"]:
        assert row["dollars"] == pytest.approx(row["meter_dollars"], rel=0.01)
        # each figure is rounded to the micro-dollar on its own: the parts may miss the total
        # by half a micro-dollar each
        slack = 0.5e-6 * (len(row["by_cause"]) + 1)
        assert row["dollars"] == pytest.approx(sum(row["by_cause"].values()), abs=slack)
    assert first["rentals"] > 0
    assert {c["class"] for c in first["classes"]} == {
        "stall",
        "boot",
        "dies",
        "net-drop",
        "orphan",
        "idle",
    }
    del first["wall_seconds"], second["wall_seconds"]
    assert first == second


def test_a_failure_mix_of_ones_own(tmp_path: Path) -> None:
    folder = specs(tmp_path)
    rates = tmp_path / "rates.yaml"
    rates.write_text(
        "# every rental's worker dies\n"
        "dies: 1\nstall: 0\nboot: 0\nnet_drop: 0\nidle: 0\nhealthy: 0\n"
        "orphans_per_day: 0\nfail_after_hours: [0.2, 0.3]\n"
    )
    doc = as_json(str(folder), "--hours", "2", "--failures", str(rates))
    assert doc["mix"]["source"] == str(rates)
    classes = {c["class"]: c for c in doc["classes"]}
    assert classes["dies"]["failures"] > 0
    assert classes["dies"]["ended"] == classes["dies"]["failures"]
    assert all(c["failures"] == 0 for k, c in classes.items() if k != "dies")
    assert doc["leaks"] == 0


def test_bad_input_says_what_is_wrong(tmp_path: Path) -> None:
    folder = specs(tmp_path)
    rates = tmp_path / "rates.yaml"
    rates.write_text("dies: lots\n")
    code, _, err = simulate(str(folder), "--hours", "1", "--failures", str(rates))
    assert code == 1
    assert f"{rates}: dies: a number, zero or more (got 'lots')" in err
    rates.write_text("explodes: 0.5\n")
    code, _, err = simulate(str(folder), "--hours", "1", "--failures", str(rates))
    assert code == 1
    assert "unknown key(s) explodes" in err
    code, _, err = simulate(str(folder), "--failures", str(tmp_path / "missing.yaml"))
    assert code == 1
    assert "missing.yaml" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.yaml").write_text("apiVersion: ray-vast/v1\nkind: Cluster\n")
    code, _, err = simulate(str(broken))
    assert code == 1
    assert "Invalid" in err


def test_the_run_s_state_is_kept_for_ray_vast_cost(tmp_path: Path) -> None:
    folder = specs(tmp_path)
    kept = tmp_path / "run"
    doc = as_json(str(folder), "--hours", "2", "--state-dir", str(kept))
    end = 1_790_000_000.0 + 3 * 3600  # the run's clock: two hours of failures, one of drain
    result = CliRunner().invoke(
        app, ["cost", "--state-dir", str(kept), "--until", str(end), "--json"]
    )
    assert result.exit_code == 0, result.stderr
    priced = json.loads(result.stdout)
    # both print dollars rounded to the micro-dollar: one rounding apart at most
    assert priced["dollars"] == pytest.approx(doc["dollars"], abs=1.01e-6)
    assert priced["dollars"] == pytest.approx(doc["meter_dollars"], rel=0.01)
    # with no --until: the run's own end (the state carries its clock), not today's wall clock
    # (which priced the run's last workers up to now: $224.61 for a run whose meter said $0.79)
    result = CliRunner().invoke(app, ["cost", "--state-dir", str(kept), "--json"])
    assert result.exit_code == 0, result.stderr
    untilled = json.loads(result.stdout)
    assert untilled["until"] == end
    assert untilled["dollars"] == pytest.approx(doc["dollars"], abs=1.01e-6)
    code, _, err = simulate(str(folder), "--hours", "1", "--state-dir", str(kept))
    assert code == 1
    assert "it already holds a state" in err


def test_the_example_failure_mix_is_the_fleet_benchmark_s() -> None:
    path = ROOT / "examples" / "failure-mix.yaml"
    assert read_mix(path.read_text(), str(path)) == FLEET_MIX
