"""Issue 21, points 7 and 8, the whole controller on virtual time.

7. The request watchdogs touched machines: no-consumer reading Ray's demand as 0 once destroyed
   a candidate that had pulled for minutes and counted its slot toward the breaker, and three
   flaps paused a healthy node type. Seed 2: "the last four cannot touch one at all".
8. Docker's "Error response from daemon" was matched case-sensitively, so a bad image tag waited
   out the pull limit instead of failing at once with blocklist `network`.
"""

from __future__ import annotations

from bench.harness import START, fleet
from reconciler.model.observation import NodeKey
from tests.scenarios.world import M, Signals, cluster, ended_by, lines, rented, run, workers

BIG = "rayproject/ray:2.60.0-py311-cu124"  # an 18 GB image no host holds: minutes of pull


def flapping(zeros: list[tuple[float, float]]) -> object:
    """Ray wants one worker, but for the given stretches its demand reads 0."""

    def demand_at(now: float) -> dict[NodeKey, int]:
        gone = any(a <= now < b for a, b in zeros)
        return {("flap", "gpu"): 0 if gone else 1}

    return demand_at


def test_demand_read_as_zero_once_ends_the_request_not_the_pulling_candidate() -> None:
    spec = cluster("flap", min_workers=0, max_workers=1, factor=1, image=BIG)
    with fleet(spec) as f:
        zeros = [(START + 1 * M, START + 2 * M)]  # while the candidate pulls (2.3 min)
        f.controller.signals = Signals(f.clock, demand_at=flapping(zeros))  # type: ignore[arg-type]
        run(f, START + 40 * M)
        first = min(rented(f, "flap"))
        assert first in workers(f, "flap"), ended_by(f)  # the candidate that pulled joined
        assert lines(f, "no_consumer")  # the request was ended...
        assert not lines(f, "slots_no_worker")  # ...and counted nothing


def test_three_flaps_of_demand_do_not_pause_a_healthy_node_type() -> None:
    spec = cluster("flap", min_workers=0, max_workers=1, factor=1, image=BIG)
    with fleet(spec) as f:
        zeros = [(START + n * 3 * M + 1 * M, START + n * 3 * M + 2 * M) for n in range(3)]
        f.controller.signals = Signals(f.clock, demand_at=flapping(zeros))  # type: ignore[arg-type]
        run(f, START + 60 * M)
        assert lines(f, "no_consumer")
        assert not lines(f, "breaker_open")
        assert len(rented(f, "flap")) == 1  # the first candidate, which joined
        assert workers(f, "flap") == set(rented(f, "flap"))


def test_a_bad_image_tag_fails_at_once_and_blocklists_the_host_for_network() -> None:
    bad = "rayproject/ray:2.60.0-py311-cpu-typo"
    spec = cluster("typo", min_workers=1, factor=1, image=bad)
    with fleet(spec) as f:
        f.sim.faults.missing_image(bad)
        run(f, START + 5 * M)
        failed = lines(f, "create_failed", "detection")
        assert failed, ended_by(f)
        assert float(failed[0]["time"]) - START < 2 * M  # not the 20-minute pull limit
        assert "Error response from daemon" in failed[0]["message"]
        entries = f.controller.records().blocklist["typo"]
        assert {e.reason for e in entries.values()} == {"network"}
