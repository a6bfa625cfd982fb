"""Demand comes and goes; pulls are slow; Ray cannot be read. The request and pool watchdogs
never undo `min_workers`, and unknown is never "no demand".

Finding 3 of issue 12: pool idle release cancelled the requests `min_workers` needs every 15
minutes, so a worker whose cold pull takes over 15 minutes never came up (24 rentals in 3 hours,
0 workers). Finding 7: a failed Ray read counted as "no demand" and cancelled requests in flight,
whose candidates were then refused and paid for twice.
"""

from __future__ import annotations

from fleetsim.harness import START, fleet
from tests.scenarios.world import (
    H,
    M,
    Signals,
    alive,
    cluster,
    dollars,
    ended_by,
    lines,
    rented,
    run,
    workers,
)
from vastsim import Market

COLD = "example/huge-model:1"


def test_a_cold_pull_longer_than_the_pool_idle_window_still_comes_up() -> None:
    market = Market.default()
    fastest = max(m.pull_speed_mbps for m in market)
    # even the fastest host needs 20 minutes: well past the 15-minute pool idle window
    market.images[COLD] = 20 * 60 * fastest / 8 / 1000
    spec = cluster(
        "cold", min_workers=1, factor=2, image=COLD, node_extra={"pull_limit_seconds": 7200}
    )
    with fleet(spec, market=market) as f:
        run(f, START + 50 * M)
        assert len(workers(f, "cold")) == 1
        assert len(rented(f, "cold")) == 2  # one request, factor 2: nothing re-rented
        assert not lines(f, "pool_idle_release")
        assert len(alive(f, "cold")) == 1  # the other candidate ended once the slot filled
        assert set(ended_by(f).values()) <= {"extra_candidate"}


def test_demand_rising_then_quiet() -> None:
    spec = cluster("bursty", min_workers=0, max_workers=4, factor=2)
    with fleet(spec, working=lambda now: now < START + 1 * H) as f:
        signals = Signals(
            f.clock,
            demand_at=lambda now: {
                ("bursty", "gpu"): 3 if START + 5 * M <= now < START + 1 * H else 0
            },
        )
        f.controller.signals = signals
        run(f, START + 5 * M)
        assert rented(f, "bursty") == {}  # no demand, min 0: nothing
        run(f, START + 20 * M)
        serving = workers(f, "bursty")
        assert len(serving) == 3
        assert len(rented(f, "bursty")) <= 3 * 2
        run(f, START + 1 * H)
        assert workers(f, "bursty") == serving  # nothing healthy ended while there was work
        run(f, START + 2 * H)
        # quiet: the money chain ends them (its stop, answered by the agent as every TERM)
        assert alive(f, "bursty") == set()
        assert not serving & {
            v
            for v, why in ended_by(f).items()
            if why in ("went_silent", "never_reported", "missing_from_listing")
        }
        stops = lines(f, "idle_stop", "decision")
        assert stops
        assert all(
            e["time"] >= START + 1 * H + spec.watchdogs.idle_stop_after_seconds - 60 for e in stops
        )
        # no leak: the meter stopped for every instance
        charged = dollars(f, "bursty")
        run(f, START + 3 * H)
        assert dollars(f, "bursty") == charged


def test_ray_unreadable_for_ten_minutes_cancels_nothing() -> None:
    spec = cluster("blind", min_workers=0, max_workers=4, factor=2)
    with fleet(spec) as f:
        signals = Signals(
            f.clock,
            demand_at=lambda now: {("blind", "gpu"): 2},
            readable=lambda now: not (START + 30 <= now < START + 630),
        )
        f.controller.signals = signals
        run(f, START + 20)  # the request is placed and its candidates rent
        first = set(rented(f, "blind"))
        assert first
        run(f, START + 30 * M)
        assert len(workers(f, "blind")) == 2
        assert not lines(f, "no_consumer") and not lines(f, "pool_idle_release")
        assert not lines(f, "late_candidate")  # no candidate refused at the door and paid twice
        assert len(rented(f, "blind")) <= 2 * 2
        assert set(ended_by(f).values()) <= {"extra_candidate"}
