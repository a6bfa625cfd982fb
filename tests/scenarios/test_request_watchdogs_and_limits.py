"""Issue 21, points 7 and 8, the whole controller on virtual time.

7. The request watchdogs touched machines: no-consumer reading Ray's demand as 0 once destroyed
   a candidate that had pulled for minutes and counted its slot toward the breaker, and three
   flaps paused a healthy node type. Seed 2: "the last four cannot touch one at all".
8. Docker's "Error response from daemon" was matched case-sensitively, so a bad image tag waited
   out the pull limit instead of failing at once with blocklist `network`; and the provisioning
   deadline gave no grace: a candidate first seen 55 s before its request's deadline was
   destroyed and its host blocklisted for a day.
"""

from __future__ import annotations

from fleetsim.harness import START, fleet
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


def test_a_candidate_rented_just_before_its_request_s_deadline_is_spared_and_joins() -> None:
    """The market holds nothing that fits for the first 190 s of a request with the 300 s floor
    deadline; the candidate rented at the next reconcile (240 s) is first listed at the deadline
    and pulls a big image past it. It keeps its own limits (the pull limit), joins, and its host
    is not blocklisted (before: destroyed at the deadline as `provision_deadline`, its host
    blocked for a day, and a second candidate rented)."""
    spec = cluster(
        "grace",
        min_workers=0,
        max_workers=1,
        factor=1,
        image=BIG,
        watchdogs={"provision_deadline_seconds": 300},
    )
    with fleet(spec) as f:
        f.controller.signals = Signals(f.clock, demand_at=lambda now: {("grace", "gpu"): 1})  # type: ignore[arg-type]
        machines = list(f.sim.market.machines)
        for machine in machines:
            f.sim.faults.take_gpus(machine)
        run(f, START + 190)
        assert not rented(f, "grace")  # nothing to rent yet: the request waits
        for machine in machines:
            f.sim.faults.free_gpus(machine)
        run(f, START + 30 * M)
        assert len(rented(f, "grace")) == 1, ended_by(f)
        assert set(rented(f, "grace")) == workers(f, "grace"), ended_by(f)
        assert not f.controller.records().blocklist.get("grace")
