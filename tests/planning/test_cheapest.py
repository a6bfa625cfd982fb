"""`scheduling: cheapest` inside Ray's packing (planning/cheapest.py): only the choice among new
nodes is made by price; everything else, and every `scheduling: ray` packing, is Ray's."""

from __future__ import annotations

import pytest

from reconciler.model.demand import CurrentNode, Demand, RayReport, ShapeCount, TypeShape
from reconciler.model.observation import Observation
from reconciler.model.plan import ActionKind
from reconciler.model.records import Records
from reconciler.planning import cheapest, packmemo, raypacking
from reconciler.spec.text import spec_yaml
from reconciler.views import plan as plan_view
from tests.planning.builders import LINEAGE, NOW, offer
from tests.planning.planned import plan
from tests.specs import load_spec

ONE = TypeShape("one", {"GPU": 1.0, "CPU": 4.0}, max_workers=10)
FOUR = TypeShape("four", {"GPU": 4.0, "CPU": 16.0}, max_workers=10)
TYPES = (ONE, FOUR)


def tasks(count: int, **shape: float) -> Demand:
    return Demand(tasks=(ShapeCount(shape or {"GPU": 1.0}, count),))


def test_rays_score_takes_the_4_gpu_node_for_four_one_gpu_tasks() -> None:
    assert dict(raypacking.pack(TYPES, [], tasks(4)).launches) == {"four": 1}


def test_cheapest_takes_the_4_gpu_node_when_it_costs_less_per_task() -> None:
    packing = raypacking.pack(TYPES, [], tasks(4), cheapest={"one": 0.7, "four": 2.0})
    assert dict(packing.launches) == {"four": 1}
    (choice,) = packing.choices
    assert (choice.node_type, choice.served, choice.per_request) == ("four", 4, 0.5)
    assert choice.others == (("one", 0.7),) and choice.ray_choice == "four"


def test_cheapest_takes_four_single_gpu_nodes_when_they_cost_less() -> None:
    packing = raypacking.pack(TYPES, [], tasks(4), cheapest={"one": 0.4, "four": 2.0})
    assert dict(packing.launches) == {"one": 4}
    assert packing.choices[0].ray_choice == "four"
    assert "$0.4000/h per request (1 on a $0.4000/h node) against four $0.5000/h" in (
        packing.choices[0].words()
    )


def test_the_last_tasks_go_to_the_node_cheapest_for_what_is_left() -> None:
    """Six tasks: a 4-GPU node ($0.50 a task), then two singles ($0.70 each, against $1.00 a
    task for a half-used 4-GPU node): $3.40/h where two 4-GPU nodes cost $4.00/h."""
    packing = raypacking.pack(TYPES, [], tasks(6), cheapest={"one": 0.7, "four": 2.0})
    assert dict(packing.launches) == {"four": 1, "one": 2}


def test_existing_nodes_are_used_before_any_new_one_however_cheap() -> None:
    running = CurrentNode(
        node_type="four", running=True, total=FOUR.resources, available=FOUR.resources
    )
    packing = raypacking.pack(TYPES, [running], tasks(4), cheapest={"one": 0.01, "four": 2.0})
    assert dict(packing.launches) == {} and packing.choices == ()


def test_a_node_type_with_no_offer_comes_after_every_priced_one() -> None:
    """Ray's score takes `one` for a single task; it has no acceptable offer (its rental would
    fail), so the priced `four` is launched."""
    assert dict(raypacking.pack(TYPES, [], tasks(1)).launches) == {"one": 1}
    packing = raypacking.pack(TYPES, [], tasks(1), cheapest={"four": 2.0})
    assert dict(packing.launches) == {"four": 1}
    assert packing.choices[0].others == (("one", None),)


def test_no_offer_anywhere_leaves_rays_choice() -> None:
    packing = raypacking.pack(TYPES, [], tasks(1), cheapest={})
    assert dict(packing.launches) == {"one": 1} and packing.choices == ()


def test_the_budget_still_bounds_what_cheapest_launches() -> None:
    prices = {"one": 0.4, "four": 2.0}
    packing = raypacking.pack(TYPES, [], tasks(4), prices=prices, allowance=1.0, cheapest=prices)
    assert dict(packing.launches) == {"one": 2}


def test_min_workers_and_caps_stay_rays() -> None:
    capped = (TypeShape("one", ONE.resources, max_workers=1), FOUR)
    packing = raypacking.pack(capped, [], tasks(4), cheapest={"one": 0.4, "four": 2.0})
    assert dict(packing.launches) == {"one": 1, "four": 1}
    floor = (TypeShape("one", ONE.resources, min_workers=2, max_workers=4), FOUR)
    packing = raypacking.pack(floor, [], tasks(1, CPU=1.0), cheapest={"one": 9.0, "four": 0.1})
    assert packing.launches["one"] == 2


CORPUS = [
    (TYPES, [], tasks(4)),
    (TYPES, [], tasks(6)),
    (TYPES, [], tasks(3, CPU=2.0)),
    (
        TYPES,
        [CurrentNode(node_type="one", running=True, total=ONE.resources, available={})],
        tasks(2),
    ),
    ((TypeShape("one", ONE.resources, min_workers=1, max_workers=2), FOUR), [], tasks(5)),
]


@pytest.mark.parametrize("case", range(len(CORPUS)))
def test_a_ray_packing_is_rays_own_with_the_wrappers_installed(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed, the wrappers do Ray's own work for every packing that does not ask for prices:
    the same answers as Ray's unwrapped scheduler."""
    node_types, nodes, demand = CORPUS[case]
    raypacking.pack(TYPES, [], tasks(1), cheapest={"one": 1.0})  # installs the wrappers
    wrapped = raypacking.pack(node_types, nodes, demand)
    from ray.autoscaler.v2 import scheduler  # noqa: PLC0415 - Ray, as the packing imports it

    cls = scheduler.ResourceDemandScheduler
    for name in ("_sched_best_node", "_try_schedule"):
        monkeypatch.setattr(cls, name, staticmethod(cheapest._original(getattr(cls, name))))
    packmemo.answer.cache_clear()
    assert raypacking.pack(node_types, nodes, demand) == wrapped
    packmemo.answer.cache_clear()


PICK = """\
max_dollars_per_hour: 20
scheduling: cheapest
breaker: {slots: 5}
node_types:
  one:
    max_workers: 4
    candidate_factor: 1
    image: img
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 1}}}
    resources: {GPU: 1}
  quad:
    max_workers: 1
    candidate_factor: 1
    image: img
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 4}}}
    resources: {GPU: 4}
"""


def test_plan_says_which_node_type_it_launched_by_price_and_why() -> None:
    spec = load_spec(spec_yaml("pick", PICK))
    observation = Observation(
        listing=(),
        offers={
            ("pick", "one"): tuple(offer(i, 0.3 + i / 100) for i in range(1, 6)),
            ("pick", "quad"): (offer(9, 1.6, num_gpus=4),),
        },
        ray={"pick": RayReport(tasks(4))},
    )
    made = plan([spec], observation, Records(), lineage=LINEAGE, serial=1, now=NOW)
    rents = [a for a in made.actions if a.kind is ActionKind.RENT]
    assert [a.node_type for a in rents] == ["one"] * 4
    text = plan_view.human(made.plan)
    assert "scheduling cheapest launched 4 node(s): $0.3100/h per request" in text
    assert "against quad $0.4000/h (Ray's score: quad)" in text
    assert "Note: pick/one: scheduling cheapest launched" in text
