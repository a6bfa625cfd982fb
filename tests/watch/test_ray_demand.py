"""Ray's demand read from its GCS becomes the workers each node type needs, as Ray's own
scheduler packs it (issue 15). The input is the very protobuf Ray's autoscaler reads
(`ClusterResourceState`), built here as Ray's GCS fills it; the records are ray-vast's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from reconciler.model.demand import ShapeCount
from reconciler.model.labels import label_for
from reconciler.model.rayversions import fingerprint
from reconciler.model.records import (
    BreakerState,
    Halt,
    InstanceRecord,
    Intent,
    Phase,
    Records,
    Role,
    breaker_key,
)
from reconciler.model.requestrecord import Request, RequestStatus, Slot
from reconciler.model.spec import ClusterSpec
from reconciler.planning import raydemand
from reconciler.planning.raydemand import Reading
from reconciler.spec.text import spec_yaml
from reconciler.watch.raydemand import report, v1_requested
from tests.scenarios.world import cluster
from tests.specs import load_spec

autoscaler = pytest.importorskip("ray.core.generated.autoscaler_pb2")

RUNNING, IDLE, DEAD = 1, 3, 2
CPU2 = {"resources": {"CPU": 2}}
SPEC = cluster("c", min_workers=0, max_workers=6, node_extra=CPU2)


def reading(
    read_state: object,
    spec: ClusterSpec,
    records: Records,
    *,
    requested: tuple[ShapeCount, ...] = (),
) -> Reading:
    """What the watch reads from Ray's state, packed by the planner as a plan packs it."""
    seen = report(read_state, requested=requested)
    return raydemand.reading(seen, spec, records.index, records.breakers)


def node(
    index: int,
    *,
    node_type: str | None = "gpu",
    total: Mapping[str, float],
    available: Mapping[str, float] | None = None,
    status: int = RUNNING,
) -> object:
    labels = {"rv_node_type": node_type, "rv_record": f"w{index}"} if node_type else {}
    return autoscaler.NodeState(
        node_id=bytes([index]) * 28,
        total_resources=dict(total),
        available_resources=dict(total if available is None else available),
        status=status,
        labels=labels,
    )


def state(
    nodes: Sequence[object] = (),
    tasks: Sequence[tuple[Mapping[str, float], int]] = (),
    gangs: Sequence[tuple[str, str, Sequence[Mapping[str, float]]]] = (),
    requested: Sequence[tuple[Mapping[str, float], int]] = (),
) -> object:
    head = autoscaler.NodeState(
        node_id=b"\xff" * 28,
        total_resources={"CPU": 0.0},
        available_resources={"CPU": 0.0},
        status=RUNNING,
        labels={"rv_role": "head"},
    )
    return autoscaler.ClusterResourceState(
        node_states=[head, *nodes],
        pending_resource_requests=[
            autoscaler.ResourceRequestByCount(
                request=autoscaler.ResourceRequest(resources_bundle=dict(shape)), count=count
            )
            for shape, count in tasks
        ],
        pending_gang_resource_requests=[
            autoscaler.GangResourceRequest(
                requests=[autoscaler.ResourceRequest(resources_bundle=dict(b)) for b in bundles],
                details=f"{pg}:{strategy}|PENDING",
            )
            for pg, strategy, bundles in gangs
        ],
        cluster_resource_constraints=[
            autoscaler.ClusterResourceConstraint(
                resource_requests=[
                    autoscaler.ResourceRequestByCount(
                        request=autoscaler.ResourceRequest(resources_bundle=dict(shape)),
                        count=count,
                    )
                    for shape, count in requested
                ]
            )
        ]
        if requested
        else [],
    )


def workers(n: int, open_slots: int = 0) -> Records:
    instances = {
        f"w{i}": InstanceRecord(
            id=f"w{i}",
            cluster="c",
            node_type="gpu",
            managed_by="L",
            label=label_for("c", "L", f"w{i}"),
            role=Role.WORKER,
            intent=Intent.RUNNING,
            phase=Phase.SERVING,
            created_at=0.0,
            vast_id=100 + i,
            offer_id=1,
            machine_id=i,
            host_id=i,
            dph_total=0.1,
        )
        for i in range(n)
    }
    requests: dict[str, Request] = {}
    if open_slots:
        requests["q1"] = Request(
            id="q1",
            cluster="c",
            node_type="gpu",
            managed_by="L",
            placed_at=0.0,
            provision_deadline=600.0,
            slots=tuple(Slot(f"q1s{k}") for k in range(open_slots)),
            status=RequestStatus.OPEN,
        )
    return Records(instances=instances, requests=requests)


def busy(n: int) -> list[object]:
    return [node(i, total={"CPU": 2}, available={"CPU": 0}) for i in range(n)]


def wanted(read_state: object, records: Records) -> int:
    return reading(read_state, SPEC, records).wanted[("c", "gpu")]


def test_six_one_cpu_tasks_on_two_core_nodes_need_three_workers() -> None:
    assert wanted(state(tasks=[({"CPU": 1}, 6)]), Records()) == 3


def test_demand_adds_to_what_is_there_three_busy_workers_and_two_tasks_make_four() -> None:
    assert wanted(state(busy(3), tasks=[({"CPU": 1}, 2)]), workers(3)) == 4


def test_free_capacity_takes_demand_first() -> None:
    idle = [node(0, total={"CPU": 2}, available={"CPU": 2})]
    assert wanted(state(idle, tasks=[({"CPU": 1}, 2)]), workers(1)) == 1


def test_slots_still_renting_count_as_pending_nodes_and_are_not_rented_again() -> None:
    # two slots open (candidates renting), Ray sees none of them: 4 tasks fit on those two
    assert wanted(state(tasks=[({"CPU": 1}, 4)]), workers(0, open_slots=2)) == 2
    assert wanted(state(tasks=[({"CPU": 1}, 6)]), workers(0, open_slots=2)) == 3


def test_slots_whose_tasks_went_away_are_needed_by_nothing_as_ray_ends_such_pending_nodes() -> None:
    """Two slots still renting, and Ray's tasks finished or were cancelled before a worker
    joined: Ray would end both pending nodes ("pending and not needed"), so nothing wants them
    and the no-consumer watchdog ends the request. (Before, the slots counted as wanted: 2, and
    the request rented on for nobody until its worker was reaped idle.)"""
    assert wanted(state(), workers(0, open_slots=2)) == 0
    assert wanted(state(tasks=[({"CPU": 1}, 2)]), workers(0, open_slots=2)) == 1
    assert wanted(state(busy(1)), workers(1, open_slots=1)) == 1  # a running worker counts


def test_a_dead_or_draining_node_is_no_capacity() -> None:
    gone = [node(0, total={"CPU": 2}, status=DEAD)]
    assert wanted(state(gone, tasks=[({"CPU": 1}, 2)]), Records()) == 1


def test_a_strict_spread_group_of_two_needs_two_nodes() -> None:
    read = state(gangs=[("pg1", "STRICT_SPREAD", [{"CPU": 1}, {"CPU": 1}])])
    assert wanted(read, Records()) == 2


def test_request_resources_rents_before_any_task() -> None:
    assert wanted(state(requested=[({"CPU": 1}, 4)]), Records()) == 2


def test_max_workers_bounds_the_launches() -> None:
    assert wanted(state(tasks=[({"CPU": 1}, 40)]), Records()) == 6


def test_a_shape_no_node_type_holds_rents_nothing_and_is_said_in_rays_words() -> None:
    read = reading(state(tasks=[({"CPU": 1, "TPU": 1}, 1)]), SPEC, Records())
    assert read.wanted[("c", "gpu")] == 0
    assert read.infeasible == ("{CPU: 1, TPU: 1} fits no node type of c",)


def test_min_workers_is_a_floor_of_the_count() -> None:
    floor = cluster("c", min_workers=2, max_workers=6, node_extra=CPU2)
    assert reading(state(), floor, Records()).wanted[("c", "gpu")] == 2


TWO = spec_yaml(
    "c",
    """\
max_dollars_per_hour: 5
node_types:
  old:
    max_workers: 4
    resources: {CPU: 2}
    image: rayproject/ray:2.49.0-py310-cpu
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 1}}}
  new:
    max_workers: 4
    resources: {CPU: 2}
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 1}}}
""",
)


def test_a_halted_node_type_launches_nothing_and_its_demand_goes_to_the_others() -> None:
    spec = load_spec(TWO, "c.yaml")
    old = spec.node_types["old"]
    halt = Halt(
        0.0, "ray_version_mismatch", "Ray 2.49.0", old.image, fingerprint(old.image, old.env)
    )
    records = Records(breakers={breaker_key("c", "old"): BreakerState(halt=halt)})
    read = reading(state(tasks=[({"CPU": 1}, 4)]), spec, records)
    assert (read.wanted[("c", "old")], read.wanted[("c", "new")]) == (0, 2)
    # not halted: Ray's scheduler spreads the same demand over both (its choice, not ours)
    free = reading(state(tasks=[({"CPU": 1}, 4)]), spec, Records())
    assert free.wanted[("c", "old")] > 0 and sum(free.wanted.values()) == 2


def test_request_resources_as_autoscaler_v1_keeps_it_is_read_when_the_state_has_none() -> None:
    kept = b'[{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, {"CPU": 1}]'  # request_resources(num_cpus=4)
    assert wanted_with(kept) == 2
    # the state's own constraint wins; nothing, garbage or an empty request asks for nothing
    read = reading(
        state(requested=[({"CPU": 1}, 2)]), SPEC, Records(), requested=v1_requested(kept)
    )
    assert read.wanted[("c", "gpu")] == 1
    for junk in (None, b"", b"[]", b"not json", b'{"CPU": 1}', b'[{"CPU": "x"}, 7]'):
        assert wanted_with(junk) == 0, junk


def wanted_with(kept: bytes | None) -> int:
    read = reading(state(), SPEC, Records(), requested=v1_requested(kept))
    return read.wanted[("c", "gpu")]


CAPPED = spec_yaml(
    "c",
    """\
max_dollars_per_hour: 5
max_workers: 3
node_types:
  cpu:
    min_workers: 1
    max_workers: 4
    resources: {CPU: 2}
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 1}}}
  gpu:
    min_workers: 1
    max_workers: 4
    resources: {CPU: 2, GPU: 1}
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer: {filters: {num_gpus: {eq: 1}}}
""",
)


def test_the_clusters_max_workers_bounds_every_node_type_together_as_rays_does() -> None:
    """Issue 24: the spec had no cluster-level max_workers (Ray's cluster YAML has one). Within
    3 workers, both node types' min_workers come first, as in Ray, and the rest goes to the
    demand: 8 CPU tasks get one more cpu worker, not four."""
    spec = load_spec(CAPPED, "c.yaml")
    assert spec.max_workers == 3
    read = reading(state(tasks=[({"CPU": 1}, 8)]), spec, Records())
    assert read.wanted == {("c", "cpu"): 2, ("c", "gpu"): 1}
