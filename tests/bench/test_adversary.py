"""The seeded adversary's slow lane: a fixed budget of seeds, each played for 6 simulated hours
into the whole controller with the invariants checked after every tick (`fleetsim.invariants`).
A counterexample fails the test with the command that replays it.

Invariant 7 (`ray-vast cost` within 1% of vastsim's meter) still has open counterexamples
(issue 21: `model/cost.py` prices a life from the first listing that saw it running, not from
vast's own start, and bills an `unknown` host in full where vastsim bills storage), so it is
judged by its own test, marked as an expected failure until that is fixed; every safety
invariant must hold.
"""

from __future__ import annotations

import pytest

from fleetsim.adversary_play import Outcome, report, run

SEEDS = range(1, 7)
HOURS = 6.0
COST = 7


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return [run(seed, HOURS) for seed in SEEDS]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_fixed_budget_of_seeds_breaks_no_safety_invariant(outcomes: list[Outcome]) -> None:
    failing = [o for o in outcomes if any(v.invariant != COST for v in o.violations)]
    assert not failing, "\n".join(report(o) for o in failing)


@pytest.mark.slow
def test_a_fixed_budget_of_seeds_prices_the_bill_within_one_percent(
    outcomes: list[Outcome],
) -> None:
    failing = [o for o in outcomes if any(v.invariant == COST for v in o.violations)]
    assert not failing, "\n".join(report(o) for o in failing)
