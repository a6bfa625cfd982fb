"""A plan's bookkeeping is changes the executor lays on the records (issue 22), not a whole state.

`Changes.between(a, b).apply(a) == b` for any two versions of the records the planner makes; laid
on records that moved on meanwhile, the entries the plan did not touch keep what moved them (the
old `Plan.records`, saved whole, dropped what another thread saved in between, such as an alert).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from reconciler.model.changes import Changes
from reconciler.model.observation import Observation
from reconciler.model.records import Alert, BlockEntry, Records
from tests.planning.builders import LINEAGE, NOW, record, records, row, spec
from tests.planning.planned import plan

IDS = st.sampled_from(["i1", "i2", "i3", "i4"])


@st.composite
def versions(draw: st.DrawFn) -> Records:
    instances = {
        i: record(i, vast_id=n, sample_at=draw(st.none() | st.floats(0, 10)))
        for n, i in enumerate(sorted(draw(st.sets(IDS))))
    }
    seen = draw(st.dictionaries(st.integers(1, 5), st.floats(0, 10), max_size=3))
    blocked = draw(st.dictionaries(st.integers(1, 3), st.floats(0, 10), max_size=2))
    blocklist = {"c1": {h: BlockEntry(h, u, "test") for h, u in blocked.items()}}
    return Records(
        instances=instances,
        unrecorded_seen=seen,
        blocklist=blocklist if blocked else {},
        next_id=draw(st.integers(1, 9)),
    )


@given(versions(), versions(), st.lists(st.sampled_from(["a", "b"]), max_size=2))
def test_the_changes_between_two_versions_make_the_second_of_the_first(
    first: Records, second: Records, raised: list[str]
) -> None:
    second = replace(
        second,
        alerts=(*first.alerts, *(Alert(NOW, "c1", cls, "m") for cls in raised)),
        next_id=max(first.next_id, second.next_id),
    )
    changes = Changes.between(first, second)
    assert changes.apply(first) == second
    assert Changes.between(first, first).empty and Changes().apply(first) is first


def test_an_alert_the_head_raised_between_the_plan_and_its_commit_is_kept() -> None:
    """The plan refreshes i1 from the listing; meanwhile the head raises an alert (a forged
    token). Saving the plan's whole next state dropped the alert; its changes keep it."""
    i1 = record("i1", vast_id=1)
    state = records(i1)
    listing = Observation(listing=(row(i1),), offers={})
    made = plan([spec()], listing, state, lineage=LINEAGE, serial=1, now=NOW)
    forged = Alert(NOW + 1, "c1", "token_check_failed", "instance 999")
    meanwhile = replace(state, alerts=(forged,))
    after = made.changes.apply(meanwhile)
    assert forged in after.alerts
    assert after.instances["i1"] == made.records.instances["i1"]  # the plan's own change is laid
