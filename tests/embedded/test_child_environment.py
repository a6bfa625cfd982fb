"""No process ray-vast starts holds the account's key (issue 13: `up` started the Ray head with
its own environment, so `VAST_API_KEY` reached the GCS, the raylet and every Ray job)."""

from __future__ import annotations

import os
from pathlib import Path

from reconciler.childenv import child_environment
from reconciler.embedded import processes
from tests.waiting import wait_for


def test_child_environment_drops_the_secrets_and_keeps_the_rest() -> None:
    env = {"VAST_API_KEY": "k-123", "CONTAINER_API_KEY": "c-456", "PATH": "/bin", "RAY_X": "1"}
    env["RAY_VAST_STATE_URL"] = "postgresql://rv:pw@db/rv"  # the database's password
    assert child_environment(env) == {"PATH": "/bin", "RAY_X": "1"}


def test_a_spawned_helper_never_sees_the_key(tmp_path: Path) -> None:
    log = tmp_path / "env.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "VAST_API_KEY": "k-secret-789"}
    proc = processes.spawn(["sh", "-c", "env; echo DONE"], env=env, log=log)
    try:
        wait_for(lambda: "DONE" in log.read_text(), timeout=10, what="the helper's output")
    finally:
        proc.wait(timeout=10)
    text = log.read_text()
    assert "k-secret-789" not in text and "VAST_API_KEY" not in text
    assert "PATH=" in text
