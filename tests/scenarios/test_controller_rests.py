"""The controller sleeps until a job is due: between reconciles it does not keep waking.

The orphan sweep runs on a reconcile's listing. When its cadence came due between two reconciles,
it stayed due (the tick could not run it without a listing) and `next_wakeup` said 0 until the
next reconcile: `watch` ticked every 50 ms for up to a minute at a time, and fleetsim's ticks
were three quarters idle (found profiling the adversary: 5,746 of 7,484 ticks of seed 5).
"""

from __future__ import annotations

from fleetsim.harness import START, fleet
from tests.scenarios.world import M, cluster, run, workers


def test_a_cluster_is_not_woken_again_and_again_between_reconciles() -> None:
    """A worker's exit at an odd moment lists at once (off the reconcile's beat); the sweep's
    beat no longer falls on a reconcile's, and must not keep the controller awake for it."""
    spec = cluster("rest", min_workers=2, max_workers=2, factor=1)
    with fleet(spec) as f:
        waits: list[float] = []

        def note() -> None:
            waits.append(f.controller.next_wakeup(f.clock.now()))

        run(f, START + 10 * M)
        first = min(workers(f, "rest"))
        f.sim.faults.exit_instance(first, at=START + 10 * M + 17)
        run(f, START + 60 * M, each=note)
        assert len(workers(f, "rest")) == 2
        at_once = [w for w in waits if w < 0.5]
        # a deadline may fall due at once now and then (an exit's listing, a retry); a sweep
        # waiting for its listing made it most ticks
        assert len(at_once) <= len(waits) // 10, (len(at_once), len(waits))
