"""What `scheduling: cheapest` would have saved, on one's own spec and failure mix (issue 25):
`ray-vast simulate` runs the same scenario under both schedulings where a node type's demand
fits another node type, and prints the dollars of each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetsim import savings
from fleetsim.simulate import Config
from reconciler.cli import app
from reconciler.spec.text import spec_yaml
from tests.scenarios.world import IMAGE, cluster, cluster_text
from tests.specs import load_spec

# An A100 pool listed first and an RTX 4090 pool: a one-GPU task fits either. Ray's score ties
# them (the same shape), and the spec's order gives the A100; by price, the RTX 4090s go first.
POOLS = spec_yaml(
    "pools",
    f"""\
    max_dollars_per_hour: 20
    node_types:
      a100:
        min_workers: 0
        max_workers: 2
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 1}}, gpu_name: {{in: [A100 SXM4, A100 PCIE]}}}}
        resources: {{GPU: 1}}
      rtx4090:
        min_workers: 0
        max_workers: 4
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 4090}}}}
        resources: {{GPU: 1}}
    """,
)


def test_only_clusters_whose_node_types_overlap_are_compared() -> None:
    pools = load_spec(POOLS, "pools.yaml")
    alone = cluster("alone")
    assert savings.overlapping([pools, alone]) == (pools,)
    assert savings.compare([alone], Config(hours=1)) is None


def test_cheapest_costs_less_than_rays_choice_for_the_same_work() -> None:
    found = savings.compare([load_spec(POOLS, "pools.yaml")], Config(seed=1, hours=3))
    assert found is not None and found.clusters == ("pools",)
    assert found.cheapest_dollars < found.ray_dollars * 0.9, found
    # not cheaper by doing less: the work delivered is within a tenth
    assert abs(found.cheapest_worked_hours - found.ray_worked_hours) < 0.1 * found.ray_worked_hours


@pytest.mark.slow  # three simulations through the CLI, twice
def test_simulate_prints_what_cheapest_would_have_saved(tmp_path: Path) -> None:
    (tmp_path / "pools.yaml").write_text(POOLS)
    result = CliRunner().invoke(app, ["simulate", str(tmp_path), "--hours", "2"])
    assert result.exit_code == 0, result.stderr
    (said,) = [line for line in result.stdout.splitlines() if "cheapest would have" in line]
    assert said.startswith("  cheapest would have saved $")
    assert "  scheduling: ray       $" in result.stdout
    done = CliRunner().invoke(app, ["simulate", str(tmp_path), "--hours", "2", "--json"])
    doc = json.loads(done.stdout)["scheduling"]
    assert doc["saved_dollars"] > 0
    assert doc["saved_dollars"] == round(doc["ray_dollars"] - doc["cheapest_dollars"], 6)
    assert f"${doc['saved_dollars']:.2f}" in said


def test_a_spec_with_no_choice_to_make_says_so(tmp_path: Path) -> None:
    (tmp_path / "alone.yaml").write_text(cluster_text("alone", min_workers=0))
    result = CliRunner().invoke(app, ["simulate", str(tmp_path), "--hours", "0.5"])
    assert result.exit_code == 0, result.stderr
    assert "would choose the same" in result.stdout
    skipped = CliRunner().invoke(
        app, ["simulate", str(tmp_path), "--hours", "0.5", "--no-scheduling"]
    )
    assert "Scheduling" not in skipped.stdout
