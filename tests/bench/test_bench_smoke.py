"""The benchmarks' quick modes, run in-process: they print their tables, and the API budget holds.

The planner's timings are not asserted (a shared machine makes them noise); its rows are. The API
benchmark's counts are exact, so they are asserted: a steady tick sends the listing's pages and
nothing else. Per-instance polling, a second listing, or a search on a full cluster breaks this.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

from bench import api_calls, planner

LISTING = "GET /api/v1/instances/"


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
    for row in rows:
        pages = math.ceil(row.instances / 25)
        assert row.start == "rented"  # the controller rented the fleet itself
        assert row.target == pages
        assert len(row.reconcile_ticks) == api_calls.MEASURED_RECONCILES
        for tick in row.reconcile_ticks:
            assert tick.actions == 0
            assert tick.routes == Counter({LISTING: pages})
            assert tick.operations == Counter({"list:ok": pages})
        assert row.other_ticks  # the 30 s nets ran between reconciles ...
        assert all(t.requests == 0 for t in row.other_ticks)  # ... without calling vast
        assert re.search(
            rf"^\s+{row.instances}\s+rented\s+{pages}\s+{pages}\s+yes\s+0\s", out, re.MULTILINE
        )
