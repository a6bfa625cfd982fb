"""The mass-destroy guard on the planner's own plans (planning/guards.py).

Point 6 of issue 21: the guard asked for at least two policy destroys, so it never held a
one-instance cluster: removing the file of a cluster with one worker ended it unasked, where the
same mistake with two workers was held.
"""

from __future__ import annotations

from reconciler.model.observation import Observation
from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind, Plan
from reconciler.model.records import InstanceRecord, Phase, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.planning.guards import hold_mass_destroys, mass_destroys
from reconciler.planning.plan import plan
from tests.planning.builders import LINEAGE, NOW, record, records, row, spec


def worker(ident: str, vast_id: int, cluster: str = "gone", **kw: object) -> InstanceRecord:
    return record(
        ident, cluster=cluster, vast_id=vast_id, role=Role.WORKER, phase=Phase.ENROLLED, **kw
    )


def planned(
    state: Records,
    listing: list[Instance],
    specs: list[ClusterSpec] | None = None,
    declared: frozenset[str] = frozenset({"c1"}),
) -> Plan:
    return plan(
        specs if specs is not None else [spec(min_workers=0)],
        Observation(listing=tuple(listing)),
        state,
        lineage=LINEAGE,
        serial=1,
        now=NOW,
        declared=declared,
    )


def destroys(p: Plan) -> list[tuple[str, str | None]]:
    return [(a.reason, a.record) for a in p.actions if a.kind is ActionKind.DESTROY]


def test_removing_the_spec_of_a_one_instance_cluster_is_held() -> None:
    only = worker("i1", 11)
    state = records(only)
    p = planned(state, [row(only)])
    assert destroys(p) == [("removed_from_spec", "i1")]
    assert mass_destroys(p, state) == ["gone: 1 of 1 instances"]
    kept, why = hold_mass_destroys(p, state)
    assert destroys(kept) == [] and [c for c, _ in why] == ["gone"]


def test_a_prune_that_pins_hold_in_part_still_counts_as_the_whole_cluster() -> None:
    """The idle one of three goes only with the person's yes: the pins end later, one by one,
    and each of those prunes would be "1 of 1" again; the removal is judged as a whole."""
    busy, pinned, idle = (
        worker("i1", 11, pinned=True),
        worker("i2", 12, pinned_by="alice"),
        worker("i3", 13),
    )
    state = records(busy, pinned, idle)
    p = planned(state, [row(busy), row(pinned), row(idle)])
    assert destroys(p) == [("removed_from_spec", "i3")]
    assert mass_destroys(p, state) == ["gone: 3 of 3 instances"]
    # the two held are alerted once (the ledger's detection beside it), then only noted
    assert [(a.cls, a.record) for a in p.alerts] == [
        ("prune_held", "i1"),
        ("prune_held", "i2"),
    ]
    assert [(d.cls, d.record) for d in p.detections] == [
        ("prune_held", "i1"),
        ("prune_held", "i2"),
    ]
    after = p.changes.apply(state)
    again = planned(after, [row(busy), row(pinned), row(idle)])
    assert again.detections == () and len(again.changes.apply(after).alerts) == 2
    assert [n.code for n in again.notes] == ["prune_held", "prune_held"]


def test_what_is_not_most_of_a_cluster_goes_ahead() -> None:
    # one of two scaled down
    a, b = worker("i1", 11, cluster="c1"), worker("i2", 12, cluster="c1")
    state = records(a, b)
    p = planned(state, [row(a), row(b)], [spec(min_workers=0, max_workers=1)])
    assert [r for r, _ in destroys(p)] == ["scale_down"]
    assert mass_destroys(p, state) == []
    # a failed machine's replacement is routine, one instance or not
    dead = worker("i1", 11, cluster="c1")
    state = records(dead)
    p = planned(state, [row(dead, actual_status="exited")], [spec(min_workers=1)])
    assert destroys(p) and all(r != "removed_from_spec" for r, _ in destroys(p))
    assert mass_destroys(p, state) == []


def test_a_lone_orphan_of_a_cluster_we_hold_nothing_of_is_swept() -> None:
    """A create whose record was lost is what the sweep is for; two or more are held."""

    def sweep(n: int) -> Plan:
        actions = tuple(
            Action(ActionKind.DESTROY, "c1", "orphan", "no record", vast_id=20 + i)
            for i in range(n)
        )
        return Plan(NOW, LINEAGE, 1, "", actions, ())

    assert mass_destroys(sweep(1), Records()) == []
    assert mass_destroys(sweep(2), Records()) == ["c1: 2 of 2 instances"]


def test_an_orphan_swept_beside_a_worker_is_half_the_cluster_and_goes_ahead() -> None:
    """The orphan is a machine beside the live records, not one of them: swept next to the one
    worker it is half of the cluster (the guard took "1 of 1" for all of it, held every such
    sweep, and the orphan billed on: a simulated 2-hour run priced 14% under vast's meter)."""
    kept = worker("i1", 11, cluster="c1")
    state = records(kept)
    orphan = Action(ActionKind.DESTROY, "c1", "orphan", "no record", vast_id=20)
    swept = Plan(NOW, LINEAGE, 1, "", (orphan,), ())
    assert mass_destroys(swept, state) == []
    assert hold_mass_destroys(swept, state)[0].actions == (orphan,)
    # with the worker scaled down in the same plan, it is all of it: held
    down = Action(ActionKind.DESTROY, "c1", "scale_down", "over max", record="i1", vast_id=11)
    both = Plan(NOW, LINEAGE, 1, "", (orphan, down), ())
    assert mass_destroys(both, state) == ["c1: 2 of 2 instances"]
