"""`status` for a simulator-only user once the embedded simulator is gone (issue 23, point 5:
after `down` it asked for VAST_API_KEY, which such a user never had)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from tests.served import LOCAL_SIM


def test_status_of_a_simulated_cluster_with_no_simulator_running_needs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("VAST_URL", "VAST_API_KEY", "RAY_VAST_STATE_URL", "RAY_VAST_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    outcome = CliRunner().invoke(
        app, ["status", str(LOCAL_SIM), "--state-dir", str(tmp_path / "state")]
    )
    assert outcome.exit_code == 0, outcome.output
    assert "VAST_API_KEY" not in outcome.output
    assert "local-sim" in outcome.output
