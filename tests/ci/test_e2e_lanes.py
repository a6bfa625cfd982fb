"""The e2e lanes of `.ci/run` are dealt by time, not by name (tests/conftest.py `deal`).

Dealt in sorted order one by one, one new file flipped every later file's lane and the two lanes
took 780 s and 258 s (CI at 4571440): the whole run waited for the longer one."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import E2E_SECONDS, deal

E2E = Path(__file__).resolve().parents[1] / "e2e"


def test_every_file_is_in_exactly_one_lane() -> None:
    files = sorted(str(p) for p in E2E.glob("test_*.py"))
    lanes = deal(files, 2)
    assert sorted(f for lane in lanes for f in lane) == files


def test_the_lanes_are_within_a_tenth_of_each_other() -> None:
    files = sorted(str(p) for p in E2E.glob("test_*.py"))
    totals = [sum(E2E_SECONDS.get(Path(f).name, 30.0) for f in lane) for lane in deal(files, 2)]
    assert max(totals) <= 1.1 * min(totals), totals
