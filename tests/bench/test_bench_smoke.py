"""The benchmarks' quick modes, run in-process: they print their tables, and the API budget holds.

The planner's timings are not asserted (a shared machine makes them noise); its rows are. The API
benchmark's counts are exact, so they are asserted: with the agent's own state machine in every
container, a steady reconcile tick sends the listing's pages and nothing else, once per reconcile
cadence, and the ticks between send nothing. Per-instance polling, a second listing, a search on a
full cluster, a record holding a deadline that lists early, or an agent destroying itself breaks
this.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from bench import api_calls, planner
from reconciler.model.records import Role
from reconciler.planning import deadlines

LISTING = "GET /api/v1/instances/"
SEARCH = "POST /api/v0/bundles/"
CREATE = "PUT /api/v0/asks/{id}/"


def test_planner_quick_prints_one_row_per_size_and_the_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = planner.main(["--quick"])

    out = capsys.readouterr().out
    assert [r.instances for r in rows] == list(planner.QUICK_SIZES)
    assert all(r.clusters == planner.QUICK_CLUSTERS and r.seconds > 0 for r in rows)
    assert all(r.listing_rows > r.instances for r in rows)  # foreign, orphan, nobody's rows too
    assert all(r.actions > 0 for r in rows)  # rents, restarts, finished destroys, orphans
    for r in rows:
        assert re.search(rf"^\s+{r.instances:,}\s+{r.clusters}\s", out, re.MULTILINE)
    assert "ratio 200/40:" in out


def test_api_calls_quick_steady_tick_is_the_listing_pages_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = api_calls.main(["--quick"])

    out = capsys.readouterr().out
    assert [r.instances for r in rows] == list(api_calls.QUICK_SIZES)
    cadence = api_calls.cluster_spec(1).cadences.reconcile_seconds
    for row in rows:
        pages = math.ceil(row.instances / 25)
        assert row.target == pages
        assert len(row.reconcile_ticks) == api_calls.MEASURED_RECONCILES
        for tick in row.reconcile_ticks:
            assert tick.actions == 0
            assert tick.routes == Counter({LISTING: pages})
            assert tick.operations == Counter({"list:ok": pages})
        assert row.every == cadence  # listed at the reconcile cadence alone, no deadline early
        assert row.other_ticks  # the 30 s nets ran between reconciles ...
        assert all(t.requests == 0 for t in row.other_ticks)  # ... without calling vast
        # the controller rented the whole fleet itself, one create per worker, nothing ended
        ramp = row.ramp.routes
        assert ramp[CREATE] == row.instances
        assert ramp[SEARCH] >= 1 and ramp[LISTING] >= 1
        assert set(ramp) == {LISTING, SEARCH, CREATE}
        assert re.search(
            rf"^\s+{row.instances}\s+{pages}\s+{pages}\s+yes\s+{cadence}s\s+0\s", out, re.MULTILINE
        )


def test_api_calls_workers_are_their_own_agents_enrollments() -> None:
    """The benchmark's steady fleet is the harness's: every worker enrolled at the head by its
    container's agent and heartbeats busy through it; nothing seeded, nothing played."""
    with api_calls.world(3) as f:
        api_calls.ramp_up(f, 3)
        records = f.controller.records()
        workers = [r for r in records.instances.values() if r.live]
        assert len(workers) == 3
        for record in workers:
            assert record.role is Role.WORKER and record.vast_id is not None
            agent = f.agent(record.vast_id)
            assert agent is not None and agent.phase == "worker"
            assert agent.enrolled_at is not None and agent.last_heartbeat_success is not None
            assert record.enrolled_at == agent.enrolled_at and record.sample_busy is True
        spec = f.controller.specs[api_calls.CLUSTER]
        assert (
            deadlines.next_listing(
                records.instances.values(), records.requests.values(), spec, after=float("-inf")
            )
            is None
        )  # steady: nothing would list before the reconcile cadence
