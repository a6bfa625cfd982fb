"""`ray-vast cost` against vastsim's meter with no `watch` running (issue 25: the bill on vast's
clocks). `apply` rents, the machines run for 90 s with nobody listing them, `down` destroys them:
the only listing that ever showed them running is `down`'s own. Before, they were priced from our
create call to our destroy as storage, bar the instant `down` saw them run ($0.0007 against the
meter's $0.0164 in the issue); vast's listing says since when each has run (its uptime), which is
when its GPU began to bill."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from fleetsim.harness import API_KEY, START
from reconciler import downing, operations
from reconciler.spec.loader import load_texts
from tests.scenarios.world import cluster_text
from tests.watch.test_bring_up import _deps
from vastsim import Market, Sim, VirtualClock


def test_apply_then_down_with_no_watch_is_priced_within_one_percent_of_the_meter(
    tmp_path: Path,
) -> None:
    text = cluster_text("alpha", min_workers=2, factor=1)
    specs = list(load_texts([("alpha.yaml", text)]).clusters)
    with Sim(market=Market.default(), clock=VirtualClock(START), api_key=API_KEY) as sim:
        deps = _deps(sim, tmp_path)
        assert operations.apply_specs(deps, specs, auto_approve=True, allow_mass_destroy=False) == 0
        deps.clock.sleep(90)  # the machines pull and run; nobody lists them
        assert downing.down(deps, "alpha", specs, auto_approve=True) == 0
        end = deps.clock.now()
        metered = sim.meter.total(at=end)
        out = io.StringIO()
        deps = replace(deps, out=out)
        assert operations.cost(deps, specs, since=None, until=None, by="cause", as_json=True) == 0
    assert metered > 0.001, "too little billed to tell"
    priced = json.loads(out.getvalue())["dollars"]
    assert priced == pytest.approx(metered, rel=0.01), (priced, metered)
