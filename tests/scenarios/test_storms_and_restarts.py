"""A 429 storm during a scale-up, and `watch` restarted in the middle of one: no double rental,
no leak, nothing healthy ended."""

from __future__ import annotations

from fleetsim.agents import ContainerFault, Image
from fleetsim.harness import START, fleet
from tests.scenarios.world import M, alive, cluster, ended_by, rented, restart, run, workers

CREATE = "PUT /api/v0/asks/{id}/"
LIST = "GET /api/v1/instances/"


def _records_answer_for_every_instance(f: object) -> None:
    fleet_ = f  # a leak is an instance of ours that no live record answers for
    records = fleet_.controller.records()  # type: ignore[attr-defined]
    known = {r.vast_id for r in records.instances.values() if r.live}
    assert alive(fleet_) <= known  # type: ignore[arg-type]


def test_a_429_storm_during_a_scale_up() -> None:
    spec = cluster("stormy", min_workers=3, max_workers=3, factor=2)
    with fleet(spec) as f:
        f.sim.faults.rate_limit(CREATE, 12, style="json", retry_after=2)
        f.sim.faults.rate_limit(LIST, 12, style="text")
        f.sim.faults.rate_limit("PUT /api/v0/search/asks/", 6, style="detail")
        run(f, START + 20 * M)
        assert len(workers(f, "stormy")) == 3
        assert len(rented(f, "stormy")) <= 3 * 2
        _records_answer_for_every_instance(f)
        assert set(ended_by(f).values()) <= {"extra_candidate"}
        assert len(alive(f, "stormy")) == 3


def test_watch_restarted_in_the_middle_of_a_scale_up() -> None:
    """The first watch dies after its creates went out and one create's answer was lost; the
    next one starts from the same state: the lost create is adopted by its label, nothing is
    rented twice, the scale-up finishes."""
    spec = cluster("restart", min_workers=3, max_workers=3, factor=1)
    with fleet(spec) as f:
        f.sim.faults.lose_create_response(1)
        f.tick()  # the first tick rents; one answer is lost
        first = set(rented(f, "restart"))
        assert len(first) == 3
        # the process dies here; a new watch takes the same state file and the same heads
        restart(f)
        run(f, START + 20 * M)
        assert len(workers(f, "restart")) == 3
        assert set(rented(f, "restart")) == first  # nothing rented twice
        _records_answer_for_every_instance(f)
        assert not ended_by(f)


def test_a_listing_that_fails_runs_neither_the_reconcile_nor_the_sweep() -> None:
    """Finding 9: the sweep was marked as run on ticks where it did not run. Now a job whose
    listing failed stays due (tried again within seconds), and nothing is planned blind."""
    spec = cluster("unlisted", min_workers=1, factor=1)
    with fleet(spec) as f:
        run(f, START + 10 * M)
        listed = f.controller.agenda.listed_at["unlisted"]
        f.sim.faults.server_error(LIST, 1000, status=502)
        run(f, f.clock.now() + 10 * M)
        now = f.clock.now()
        schedule = f.controller.agenda.schedules["unlisted"]
        assert f.controller.agenda.listed_at["unlisted"] == listed  # no listing was had
        for job in ("reconcile", "orphan_sweep"):  # both still due within seconds
            assert now - schedule.last[job] >= schedule.periods[job] - 15, job
        assert len(workers(f, "unlisted")) == 1  # and nothing was ended on an unknown listing


def test_deadlines_do_not_turn_a_vast_outage_into_a_request_loop() -> None:
    """A record holds a deadline (a candidate's enrollment limit), and every listing fails: the
    controller lists again at most every few seconds, not at every loop turn."""
    spec = cluster("outage", min_workers=1, factor=1)
    with fleet(spec, faults=lambda vast_id: ContainerFault(image=Image.IDLES)) as f:
        run(f, START + 30)  # rented; its container runs; the enrollment limit is pending
        f.sim.faults.fail_listing(page=1, status=400, count=100_000)  # fails fast, no retries
        sent = f.sim.counters[LIST]
        run(f, f.clock.now() + 10 * M)
        listings = f.sim.counters[LIST] - sent
        # at most one listing every 10 s (the cadence would list 10 times; a loop, hundreds)
        assert 5 <= listings <= 10 * M / 10 + 1, listings
        assert len(rented(f, "outage")) == 1  # and nothing was rented blind
