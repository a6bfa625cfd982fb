"""Limits fire within seconds of their thresholds at default cadences, not at the next reconcile.

Finding 5 of issue 12: the enrollment limit fired at 120 s (seed: 60 s after first seen running),
missing-from-listing 120 s after the last listing that showed it (seed: 60 s), because both were
checked only on the 60-s reconcile, with a strict `>`, and missing was measured from the first
listing without it.
"""

from __future__ import annotations

from fleetsim.agents import ContainerFault, Image
from fleetsim.harness import START, fleet
from reconciler.model.records import Role
from tests.scenarios.world import M, cluster, lines, measured, run, workers

SLACK = 10.0


def test_the_enrollment_limit_fires_within_ten_seconds_of_its_threshold() -> None:
    spec = cluster("late", min_workers=1, factor=1)
    limit = spec.watchdogs.enrollment_limit_seconds
    with fleet(spec, faults=lambda vast_id: ContainerFault(image=Image.IDLES)) as f:
        run(f, START + 10 * M)
        found = lines(f, "enrollment_timeout", "detection")
        assert found
        figures = measured(found, r"seen running (\d+)s ago")
        assert figures and all(limit <= x <= limit + SLACK for x in figures), figures


def test_missing_from_the_listing_ends_sixty_seconds_after_the_last_listing_that_showed_it() -> (
    None
):
    spec = cluster("hide", min_workers=2, factor=1)
    window = spec.watchdogs.missing_from_listing_seconds
    with fleet(spec) as f:
        run(f, START + 10 * M)
        victim = min(workers(f, "hide"))
        f.sim.faults.hide_instance(victim, listings=1000)  # vast forgets it, it still bills
        run(f, f.clock.now() + 10 * M)
        found = [
            e for e in lines(f, "missing_from_listing", "detection") if e["instance"] == victim
        ]
        assert len(found) == 1
        (figure,) = measured(found, r"for (\d+)s since the last list that showed it")
        assert window <= figure <= window + SLACK
        assert victim not in f.sim.instances  # destroyed: the meter stopped
        records = f.controller.records()
        assert len(workers(f, "hide")) == 2  # and replaced
        assert any(r.role is Role.WORKER for r in records.instances.values())


def test_one_listing_without_it_ends_nothing() -> None:
    spec = cluster("blink", min_workers=2, factor=1)
    with fleet(spec) as f:
        run(f, START + 10 * M)
        before = workers(f, "blink")
        f.sim.faults.hide_instance(min(before), listings=1)
        run(f, f.clock.now() + 10 * M)
        assert workers(f, "blink") == before
        assert not lines(f, "missing_from_listing")
