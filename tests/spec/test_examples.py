"""Every example a user may copy is valid, and `ray-vast validate` says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.spec.loader import load

EXAMPLES = Path(__file__).parents[2] / "examples" / "clusters"
FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_the_three_named_examples_exist() -> None:
    names = {f.name for f in FILES}
    assert {"local-sim.yaml", "rtx4090-pool.yaml", "multi-pool-budget.yaml"} <= names


@pytest.mark.parametrize("example", FILES, ids=[f.stem for f in FILES])
def test_example_is_valid(example: Path) -> None:
    result = load(example)
    assert result.ok, [str(d.location) + " " + d.summary for d in result.diagnostics]
    assert len(result.clusters) == 1
    assert "yaml-language-server: $schema=../../schemas/cluster.schema.json" in example.read_text()


def test_validate_command_accepts_the_examples_directory() -> None:
    outcome = CliRunner().invoke(app, ["validate", str(EXAMPLES)])
    assert outcome.exit_code == 0, outcome.output
    assert "Success! 3 clusters valid" in outcome.output


def test_validate_json_reports_every_cluster() -> None:
    outcome = CliRunner().invoke(app, ["validate", str(EXAMPLES), "--json"])
    payload = json.loads(outcome.stdout)
    assert outcome.exit_code == 0
    assert payload["format_version"] == "1.0"
    assert payload["valid"] is True
    assert sorted(payload["clusters"]) == ["local-sim", "rtx4090-pool", "train-and-prep"]


def test_defaults_come_from_the_schema() -> None:
    (cluster,) = load(EXAMPLES / "local-sim.yaml").clusters
    assert cluster.watchdogs.heartbeat_interval_seconds == 30
    assert cluster.watchdogs.worker_gives_up_after_seconds == 300
    assert cluster.watchdogs.enrollment_limit_seconds == 60
    assert cluster.watchdogs.candidate_self_destroy_seconds == 600
    assert cluster.watchdogs.never_reported_seconds == 1800
    assert cluster.breaker.slots == 3 and cluster.breaker.pause_seconds == 600
    assert cluster.blocklist.timeout == 86400 and cluster.blocklist.network == 86400
    assert cluster.cadences.orphan_sweep_seconds == 300
    assert cluster.node_types["cpu"].candidate_factor == 2
    assert cluster.provider.url == "https://console.vast.ai"
