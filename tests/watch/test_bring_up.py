"""`watch` keeps a cluster `down` holds down; `up` (a watch that brings its clusters up) lifts
the hold. Before `up` lifted it, `up` after `down` (the README's flow: up, Ctrl-C, down, up
again) would have watched an unchanged spec and rented nothing, for good."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetsim.harness import API_KEY, START, VAST_URL
from reconciler import downing
from reconciler.deps import Deps
from reconciler.spec.loader import load
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings
from reconciler.watch.runner import WatchOptions, watch
from reconciler.watch.source import SpecSource
from tests.scenarios.world import cluster_text
from tests.watch.test_ray_readers import LoopClock
from vastsim import Market, Sim, VirtualClock
from vastsim.faults import CREATE_ROUTE
from vastsim.transport import InProcessTransport

LOG = logging.getLogger("ray_vast.test")


@pytest.fixture
def sim() -> Iterator[Sim]:
    with Sim(market=Market.default(), clock=VirtualClock(START), api_key=API_KEY) as sim:
        yield sim


def _deps(sim: Sim, tmp_path: Path) -> Deps:
    clock = LoopClock(sim)
    client = client_from_settings(
        env={"VAST_API_KEY": API_KEY, "VAST_URL": VAST_URL}, spec_url=None, clock=clock,
        transport=InProcessTransport(sim), settings=ClientSettings(pacing=False),
    )  # fmt: skip
    return Deps(
        clock=clock, env={}, state_dir=tmp_path / "state", out=io.StringIO(),
        err=io.StringIO(), interactive=False, ask=lambda prompt: "",
        provider_factory=lambda url: client,
    )  # fmt: skip


def _creates(sim: Sim) -> int:
    return sum(1 for r in sim.requests if r.route == CREATE_ROUTE)


def test_watch_keeps_a_downed_cluster_down_and_up_brings_it_back(sim: Sim, tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "alpha.yaml").write_text(cluster_text("alpha", min_workers=1, factor=1))
    deps = _deps(sim, tmp_path)
    assert watch(deps, WatchOptions(SpecSource(specs), max_ticks=2, metrics=False), LOG) == 0
    assert _creates(sim) == 1
    spec = list(load(specs).clusters)
    assert downing.down(deps, "alpha", spec, auto_approve=True) == 0  # with its spec given
    assert not [i for i in sim.instances.values() if i.destroyed_at is None]

    assert watch(deps, WatchOptions(SpecSource(specs), max_ticks=3, metrics=False), LOG) == 0
    assert _creates(sim) == 1, "a plain watch rents nothing for a cluster held down"

    up = WatchOptions(SpecSource(specs), max_ticks=2, metrics=False, bring_up=True)
    assert watch(deps, up, LOG) == 0
    assert _creates(sim) == 2, "up brings it back"
