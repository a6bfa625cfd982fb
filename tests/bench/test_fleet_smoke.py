"""The fleet benchmark's quick mode, run in-process: one table row per policy, ray-vast cheapest
and safe, and the same seed giving the same dollars.

The quick scenario is tiny (three virtual hours, a handful of workers) but holds every failure
class at least once, so a policy that stops catching one of them moves its ratio. Its dollars are
exact, so they are compared exactly across two runs: a dependence on the wall clock, on set order
or on an unseeded draw shows up as a difference here.
"""

from __future__ import annotations

import re
import time

import pytest

from bench import fleet
from bench.policies import POLICIES


@pytest.mark.timeout(120)
def test_fleet_quick_ray_vast_wastes_least_and_the_same_seed_gives_the_same_dollars(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.perf_counter()
    first = fleet.main(["--quick", "--seed", "1"])
    out = capsys.readouterr().out
    second = fleet.main(["--quick", "--seed", "1"])
    elapsed = time.perf_counter() - started

    assert [r.policy for r in first] == [p.name for p in POLICIES]
    for result in first:
        assert re.search(rf"^{re.escape(result.policy)}\s+ALL\s", out, re.MULTILINE)
    by_name = {r.policy: r.result for r in first}
    ray_vast = by_name["ray-vast"]
    assert all(c.failures > 0 for c in ray_vast.classes), "a failure class was never injected"
    assert all(c.ended == c.failures for c in ray_vast.classes)
    assert sum(ray_vast.false_destroys.values()) == 0
    assert ray_vast.leaks == 0
    assert ray_vast.ratio < by_name["provider-only"].ratio
    assert ray_vast.ratio < by_name["idle-only"].ratio
    assert ray_vast.ratio == min(r.ratio for r in by_name.values())
    assert [r.result.figures() for r in first] == [r.result.figures() for r in second]
    assert elapsed < 30
