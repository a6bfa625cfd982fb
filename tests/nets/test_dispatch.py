"""One job table (issue 22): every scheduled watchdog job has a net in `nets/dispatch.JOBS`,
except the two that run on a listing (the planner's), and the table runs them in its order."""

from __future__ import annotations

from reconciler.nets import dispatch
from reconciler.watch.agenda import LISTING_JOBS
from reconciler.watch.schedule import JOBS as SCHEDULED


def test_every_scheduled_job_has_a_net() -> None:
    assert set(SCHEDULED) - LISTING_JOBS == set(dispatch.JOBS)


def test_the_scanner_runs_before_the_nets_that_act_on_its_timers() -> None:
    order = list(dispatch.JOBS)
    assert order[0] == dispatch.IDLE_SCAN
    assert all(order.index(job) > 0 for job in dispatch.ACTING_ON_QUIET)


def test_a_policy_without_the_scanner_has_no_scanner_and_keeps_the_pool_jobs() -> None:
    table = dispatch.table({}, idle_scanner=False)
    assert set(table) == set(dispatch.POOL_JOBS)
