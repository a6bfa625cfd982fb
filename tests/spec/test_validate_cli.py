"""`ray-vast validate` on broken input: exit 1, every problem with its place, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from reconciler.cli import app

BROKEN = """apiVersion: ray-vast/v1
kind: Cluster
metadata:
  name: t
spec:
  max_dollars_per_hour: 2
  node_types:
    gpu:
      min_workers: 3
      max_workers: 2
      imag: x
"""


def test_human_output_names_file_line_and_field(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(BROKEN)
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert outcome.exit_code == 1
    assert f"{spec}:11:7: error: unknown field 'imag'; did you mean 'image'?" in outcome.stderr
    assert f"{spec}:8:5: error: missing required field 'image'" in outcome.stderr
    assert "Invalid: 2 errors in 1 file." in outcome.stderr
    assert "Traceback" not in outcome.output


def test_json_output_lists_diagnostics(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(BROKEN)
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path), "--json"])
    payload = json.loads(outcome.stdout)
    assert outcome.exit_code == 1
    assert payload["valid"] is False and payload["error_count"] == 2
    paths = {d["path"] for d in payload["diagnostics"]}
    assert paths == {"spec.node_types.gpu.imag", "spec.node_types.gpu"}


def test_semantic_errors_wait_for_schema_errors(tmp_path: Path) -> None:
    """min > max is not reported while the node type is schema-invalid: one fix at a time is
    not the goal, but a semantic check must never run on a shape it cannot trust."""
    (tmp_path / "c.yaml").write_text(BROKEN)
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert "more than max_workers" not in outcome.stderr


def test_missing_directory_is_an_error_not_a_crash(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path / "nope")])
    assert outcome.exit_code == 1
    assert "no such file or directory" in outcome.stderr


def test_empty_directory_is_an_error(tmp_path: Path) -> None:
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert outcome.exit_code == 1
    assert "no .yaml or .yml files" in outcome.stderr


def test_non_utf8_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_bytes(b"\xff\xfe\x00bad")
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert outcome.exit_code == 1
    assert "not UTF-8 text" in outcome.stderr


def test_hidden_folders_are_skipped(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.yaml").write_text("not: a cluster")
    (tmp_path / "ok.yaml").write_text(
        BROKEN.replace("      imag: x", "      image: x").replace(
            "min_workers: 3", "min_workers: 1"
        )
    )
    outcome = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert outcome.exit_code == 0, outcome.output


def test_version_and_help() -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["--version"]).stdout.startswith("ray-vast ")
    helped = runner.invoke(app, ["validate", "--help"])
    assert helped.exit_code == 0 and "Examples:" in helped.stdout
