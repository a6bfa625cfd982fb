"""A cluster `down` holds down, in the pure planner (issue 23; `ClusterRecord.down_at`).

`watch` leaves a held cluster out of the specs it plans (tests/scenarios/test_down_while_watching
shows the whole controller): what is left of it is ended like a removed cluster's machines, with
no pin and no Ray work holding it, since `down` ends everything. Planned with its spec all the
same (`ray-vast plan` of the spec directory), it is planned as ever, and the plan says that
carrying it out lifts the hold.
"""

from __future__ import annotations

from reconciler.model.applied import downed, held_down
from reconciler.model.evolve import evolve
from reconciler.model.records import ClusterRecord, InstanceRecord, Phase, Records, Role
from tests.planning.builders import NOW, record, records, row, spec
from tests.planning.test_guards import destroys, planned


def worker(ident: str, vast_id: int, **kw: object) -> InstanceRecord:
    return record(
        ident, cluster="c1", vast_id=vast_id, role=Role.WORKER, phase=Phase.ENROLLED, **kw
    )


def held(state: Records) -> Records:
    mine = spec(min_workers=1)
    state = evolve(state, clusters={"c1": ClusterRecord("c1", mine.digest)})
    return downed(state, "c1", NOW - 60)


def test_what_is_left_of_a_held_cluster_ends_and_no_pin_holds_it() -> None:
    pinned, busy = worker("i1", 11, pinned_by="alice"), worker("i2", 12, pinned=True)
    state = held(records(pinned, busy))
    p = planned(state, [row(pinned), row(busy)], specs=[], declared=frozenset({"c1"}))
    assert destroys(p) == [("down", "i1"), ("down", "i2")]
    assert not p.alerts, "nothing is held against a down"


def test_a_held_cluster_planned_with_its_spec_is_planned_and_says_the_hold_lifts() -> None:
    kept = worker("i1", 11)
    state = held(records(kept))
    assert held_down(state, {"c1": spec(min_workers=1)}) == {"c1"}
    p = planned(state, [row(kept)], specs=[spec(min_workers=1)], declared=frozenset({"c1"}))
    assert destroys(p) == [], "planned as ever: its one worker is what the spec asks"
    assert [n.code for n in p.notes] == ["held_down"]


def test_a_changed_spec_is_not_held() -> None:
    state = held(records())
    assert held_down(state, {"c1": spec(min_workers=2)}) == set()


def test_a_cluster_with_no_record_and_no_spec_has_nothing_to_hold_it_by() -> None:
    assert downed(records(), "c1", NOW) == records()
    made = downed(records(), "c1", NOW, [spec(min_workers=1)])
    assert made.clusters["c1"].down_at == NOW
