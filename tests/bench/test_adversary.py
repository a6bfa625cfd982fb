"""The seeded adversary's slow lane: a fixed budget of seeds, each played for 6 simulated hours
into the whole controller with the invariants checked after every tick (`fleetsim.invariants`).
A counterexample fails the test with the command that replays it. On the code before issue 21's
fixes this is red by design: it is what the adversary is for.
"""

from __future__ import annotations

import pytest

from fleetsim.adversary_play import report, run

SEEDS = range(1, 7)
HOURS = 6.0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_fixed_budget_of_seeds_finds_no_counterexample() -> None:
    found = [run(seed, HOURS, stop_at_first=True) for seed in SEEDS]
    failing = [o for o in found if o.violations]
    assert not failing, "\n".join(report(o) for o in failing)
