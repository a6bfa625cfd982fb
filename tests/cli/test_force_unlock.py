"""`ray-vast state force-unlock ID [--force]`: Terraform's spelling; nothing is asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.state.errors import LockLostError
from reconciler.state.filestore import FileStore


@pytest.mark.parametrize("flags", [[], ["--force"], ["-force"]])
def test_force_unlock_takes_the_id_with_or_without_force(tmp_path: Path, flags: list[str]) -> None:
    state = tmp_path / ".ray-vast"
    holder = FileStore(state, clock=FakeClock(1_800_000_000.0))
    info = holder.lock("apply")
    result = CliRunner().invoke(
        app, ["state", "force-unlock", info.id, *flags, "--state-dir", str(state)], input=""
    )
    assert result.exit_code == 0, result.output
    assert f"Lock {info.id} removed" in result.stdout
    assert not holder.lock_path.exists()
    with pytest.raises(LockLostError):
        holder.unlock()


def test_force_unlock_with_force_still_needs_the_right_id(tmp_path: Path) -> None:
    state = tmp_path / ".ray-vast"
    holder = FileStore(state, clock=FakeClock(1_800_000_000.0))
    holder.lock("apply")
    result = CliRunner().invoke(
        app, ["state", "force-unlock", "not-the-id", "--force", "--state-dir", str(state)]
    )
    assert result.exit_code == 1
    assert "different ID" in result.stderr
    assert holder.lock_path.exists()
    holder.unlock()
