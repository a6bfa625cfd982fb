"""A served vastsim and a way to run the real `ray-vast` command against it (fixture `world`)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vastsim import Market, RealClock, Server, Sim, serve

ROOT = Path(__file__).resolve().parents[1]
LOCAL_SIM = ROOT / "examples" / "clusters" / "local-sim.yaml"
API_KEY = "e2e-account-key-5f0c2b"


@dataclass
class World:
    sim: Sim
    server: Server
    state_dir: Path

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAST_", "RAY_VAST_"))}
        # vastsim does not rate-limit by default, so the client need not pace itself here
        env.update(VAST_URL=self.server.url, VAST_API_KEY=API_KEY, RAY_VAST_PACING="off")
        return env

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`ray-vast ARGS --state-dir ...` as a real process, stdin closed (no terminal)."""
        return subprocess.run(
            [sys.executable, "-m", "reconciler", *args, "--state-dir", str(self.state_dir)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
            cwd=ROOT,
        )

    def labels(self) -> list[str]:
        return sorted(i.label or "" for i in self.sim.instances.values())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    sim = Sim(market=Market.default(), clock=RealClock(), api_key=API_KEY, admin_key="admin")
    with serve(sim) as server:
        yield World(sim, server, tmp_path / "state")
