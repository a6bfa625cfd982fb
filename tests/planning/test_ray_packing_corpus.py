"""ray-vast launches what Ray's own autoscaler launches (issue 15, DESIGN.md 10).

Each case is a ray-vast cluster spec, the current nodes and Ray's demand. Two paths decide the
nodes to launch per node type:

- the subject is ray-vast's: the spec's YAML through the loader to node-type shapes
  (`reconciler/spec/shapes.py`), then `reconciler.planning.raypacking.pack`;
- the oracle is Ray configured the Ray way: a cluster config with `available_node_types` written
  here by hand (not derived from the spec), read by Ray's `AutoscalingConfig`, the instances and
  requests built the way Ray's instance manager and GCS build them (Ray's `ResourceRequestUtil`,
  the GCS's placement-group constraints), and Ray's `ResourceDemandScheduler` deciding, with the
  launch-config check off as KubeRay runs it.

Both must launch the same counts by node type and leave the same demand unplaced; many cases
also state the expected counts, so that both paths agreeing on nonsense fails too.

ray-vast launches fewer than Ray only where its budget binds (`max_dollars_per_hour`) or its
breaker pauses a node type. The budget is a bound inside the packing (issue 24), applied the way
Ray applies a node type's `max_workers`: the budget cases' oracle walks Ray's own loop one node
at a time (the cap raised by one while the launches stay within the allowance, a node type whose
next node they cannot pay for bounded where it stands), and the subject must land where it does.
Without an allowance the packing is Ray's alone (`test_without_an_allowance_the_packing_is_rays`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import ray
from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
from ray.autoscaler.v2.scheduler import ResourceDemandScheduler, SchedulingRequest
from ray.autoscaler.v2.schema import AutoscalerInstance
from ray.autoscaler.v2.utils import ResourceRequestUtil
from ray.core.generated.autoscaler_pb2 import (
    BundleSelector,
    ClusterResourceConstraint,
    GangResourceRequest,
    NodeState,
    NodeStatus,
    ResourceRequestByCount,
)
from ray.core.generated.common_pb2 import LabelSelectorOperator
from ray.core.generated.instance_manager_pb2 import Instance, NodeKind

from reconciler.model.demand import (
    Bundle,
    CurrentNode,
    Demand,
    LabelConstraint,
    LabelSelector,
    PlacementGroup,
    ShapeCount,
    TypeShape,
    Unmet,
    label_selector,
    request_resources,
    type_shapes,
)
from reconciler.model.rayversions import TESTED_RAY_VERSION
from reconciler.model.spec import ClusterSpec
from reconciler.planning import raypacking
from reconciler.planning.raypacking import pack
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec

GB = 10**9

# -- the clusters: a ray-vast spec, and the same cluster as Ray's available_node_types ---------


@dataclass(frozen=True)
class Cluster:
    spec: str  # the node_types of a ray-vast spec
    ray: dict[str, dict[str, Any]]  # Ray's available_node_types, written by hand


def labels(cluster: str, node_type: str, **more: str) -> dict[str, str]:
    return {"rv_cluster": cluster, "rv_node_type": node_type, **more}


CLUSTERS: dict[str, Cluster] = {
    "cpu2": Cluster(
        """
    cpu:
      max_workers: 6
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 2}}}
""",
        {"cpu": {"resources": {"CPU": 2}, "labels": labels("cpu2", "cpu"), "max_workers": 6}},
    ),
    "cpu2-min1": Cluster(
        """
    cpu:
      min_workers: 1
      max_workers: 6
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 2, lte: 4}}}
""",
        {
            "cpu": {
                "resources": {"CPU": 2},
                "labels": labels("cpu2-min1", "cpu"),
                "min_workers": 1,
                "max_workers": 6,
            }
        },
    ),
    # The simulator's example: its one node type rents one-GPU offers, so for Ray it is a GPU
    # node type (the agent advertises the offer's GPU).
    "local-sim": Cluster(
        """
    cpu:
      min_workers: 1
      max_workers: 6
      image: img
      offer:
        filters:
          num_gpus: {eq: 1}
          cpu_cores_effective: {gte: 2}
          dph_total: {lte: 0.30}
""",
        {
            "cpu": {
                "resources": {"CPU": 2, "GPU": 1},
                "labels": labels("local-sim", "cpu"),
                "min_workers": 1,
                "max_workers": 6,
            }
        },
    ),
    "mixed": Cluster(
        """
    small:
      max_workers: 4
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 4}, cpu_ram: {gte: 16000}}}
    gpu:
      max_workers: 3
      image: img
      offer:
        filters:
          gpu_name: {eq: RTX 4090}
          num_gpus: {eq: 1}
          cpu_cores_effective: {gte: 8}
          cpu_ram: {gte: 32000}
    big:
      max_workers: 2
      image: img
      offer: {filters: {cpu_cores_effective: {gt: 15.5}}}
""",
        {
            "small": {
                "resources": {"CPU": 4, "memory": 11.2 * GB, "object_store_memory": 4.8 * GB},
                "labels": labels("mixed", "small"),
                "max_workers": 4,
            },
            "gpu": {
                "resources": {
                    "CPU": 8,
                    "GPU": 1,
                    "memory": 22.4 * GB,
                    "object_store_memory": 9.6 * GB,
                    "accelerator_type:GeForce-RTX-4090": 1,
                },
                "labels": labels("mixed", "gpu", **{"ray.io/accelerator-type": "GeForce-RTX-4090"}),
                "max_workers": 3,
            },
            "big": {"resources": {"CPU": 15}, "labels": labels("mixed", "big"), "max_workers": 2},
        },
    ),
    # The GPU node type comes first: ties go to the first node type, GPU conservation does not.
    "gpu-first": Cluster(
        """
    gpu:
      max_workers: 2
      image: img
      offer: {filters: {num_gpus: {gte: 1}, cpu_cores_effective: {gte: 4}}}
    cpu:
      max_workers: 2
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 4}}}
""",
        {
            "gpu": {
                "resources": {"CPU": 4, "GPU": 1},
                "labels": labels("gpu-first", "gpu"),
                "max_workers": 2,
            },
            "cpu": {
                "resources": {"CPU": 4},
                "labels": labels("gpu-first", "cpu"),
                "max_workers": 2,
            },
        },
    ),
    "custom": Cluster(
        """
    prep:
      max_workers: 4
      image: img
      offer: {filters: {cpu_cores_effective: {in: [8, 16]}}}
      ray_resources: {prep: 1}
    a100:
      max_workers: 2
      image: img
      offer:
        filters:
          gpu_name: {in: [A100 SXM4, A100 PCIE]}
          num_gpus: {eq: 1}
      resources: {CPU: 8}
      ray_labels: {accelerator: a100}
""",
        {
            "prep": {
                "resources": {"CPU": 8, "prep": 1},
                "labels": labels("custom", "prep"),
                "max_workers": 4,
            },
            "a100": {
                # what Ray's autoscaler fills in for an A100 node type (and what a node with
                # the card gets from Ray): its accelerator's resource and label
                "resources": {"CPU": 8, "GPU": 1, "accelerator_type:A100": 1},
                "labels": labels(
                    "custom", "a100", accelerator="a100", **{"ray.io/accelerator-type": "A100"}
                ),
                "max_workers": 2,
            },
        },
    ),
    "declared": Cluster(
        """
    eu:
      max_workers: 3
      image: img
      resources: {CPU: 4, GPU: 2, memory: 8000000000}
      labels: {zone: eu}
    us:
      max_workers: 3
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 8}}}
      resources: {CPU: 4}
      labels: {zone: us}
""",
        {
            "eu": {
                "resources": {"CPU": 4, "GPU": 2, "memory": 8 * GB},
                "labels": labels("declared", "eu", zone="eu"),
                "max_workers": 3,
            },
            "us": {
                "resources": {"CPU": 4},
                "labels": labels("declared", "us", zone="us"),
                "max_workers": 3,
            },
        },
    ),
    "two-gpu": Cluster(
        """
    one:
      max_workers: 4
      image: img
      offer: {filters: {num_gpus: {eq: 1}, cpu_cores_effective: {gte: 4}}}
    four:
      max_workers: 2
      image: img
      offer: {filters: {num_gpus: {in: [8, 4]}, cpu_cores_effective: {gte: 16}}}
""",
        {
            "one": {
                "resources": {"CPU": 4, "GPU": 1},
                "labels": labels("two-gpu", "one"),
                "max_workers": 4,
            },
            "four": {
                "resources": {"CPU": 16, "GPU": 4},
                "labels": labels("two-gpu", "four"),
                "max_workers": 2,
            },
        },
    ),
    "bounded": Cluster(
        """
    cpu:
      min_workers: 1
      max_workers: 2
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 2}}}
    gpu:
      max_workers: 1
      image: img
      offer: {filters: {num_gpus: {eq: 1}, cpu_cores_effective: {gte: 4}}}
""",
        {
            "cpu": {
                "resources": {"CPU": 2},
                "labels": labels("bounded", "cpu"),
                "min_workers": 1,
                "max_workers": 2,
            },
            "gpu": {
                "resources": {"CPU": 4, "GPU": 1},
                "labels": labels("bounded", "gpu"),
                "max_workers": 1,
            },
        },
    ),
    # A node type whose shape has no CPU (validate warns): Ray places nothing needing CPU there.
    "nocpu": Cluster(
        """
    cpu:
      max_workers: 3
      image: img
      offer: {filters: {cpu_cores_effective: {gte: 4}}}
    gpu:
      max_workers: 2
      image: img
      offer: {filters: {num_gpus: {eq: 2}}}
""",
        {
            "cpu": {"resources": {"CPU": 4}, "labels": labels("nocpu", "cpu"), "max_workers": 3},
            "gpu": {"resources": {"GPU": 2}, "labels": labels("nocpu", "gpu"), "max_workers": 2},
        },
    ),
}


def spec_text(name: str) -> str:
    return spec_yaml(name, f"max_dollars_per_hour: 50\nnode_types:{CLUSTERS[name].spec}")


def load_cluster(name: str) -> ClusterSpec:
    return load_spec(spec_text(name), f"{name}.yaml")


# -- the current nodes and the demand ---------------------------------------------------------

# Ray's head as ray-vast starts it (reconciler/embedded/rayhead.py): no CPU, a small object store.
HEAD = CurrentNode(
    "head",
    running=True,
    total={
        "memory": 2 * GB,
        "object_store_memory": 0.1 * GB,
        "node:__internal_head__": 1,
        "node:10.0.0.1": 1,
    },
    labels={"rv_role": "head"},
    head=True,
)
_serial = iter(range(2, 10**6))


def worker(
    node_type: str,
    cluster: str,
    *,
    cpu: float = 0,
    gpu: float = 0,
    free_cpu: float | None = None,
    free_gpu: float | None = None,
    extra: Mapping[str, float] | None = None,
    more_labels: Mapping[str, str] | None = None,
) -> CurrentNode:
    """A running worker as Ray reports it: its real totals (with the per-node resources Ray and
    ray-vast add) and what is free."""
    n = next(_serial)
    total: dict[str, float] = {
        "memory": 6 * GB,
        "object_store_memory": 2 * GB,
        f"node:10.0.0.{n % 250}": 1,
        f"rv-slot-s{n}": 1,
        **(extra or {}),
    }
    if cpu:
        total["CPU"] = cpu
    if gpu:
        total["GPU"] = gpu
    available = dict(total)
    if cpu:
        available["CPU"] = cpu if free_cpu is None else free_cpu
    if gpu:
        available["GPU"] = gpu if free_gpu is None else free_gpu
    return CurrentNode(
        node_type,
        running=True,
        total=total,
        available=available,
        labels={**labels(cluster, node_type), "rv_record": f"r{n}", **(more_labels or {})},
    )


def pending(node_type: str) -> CurrentNode:
    """A slot still renting (or booting): not in Ray yet."""
    return CurrentNode(node_type, running=False)


def tasks(shape: Mapping[str, float], count: int = 1, *selectors: LabelSelector) -> ShapeCount:
    return ShapeCount(dict(shape), count, tuple(selectors))


def pg(pg_id: str, strategy: Any, *bundles: Mapping[str, float] | Bundle) -> PlacementGroup:
    made = tuple(b if isinstance(b, Bundle) else Bundle(dict(b)) for b in bundles)
    return PlacementGroup(pg_id, strategy, made)


def on(key: str, *values: str) -> LabelSelector:
    return (LabelConstraint(key, values),)


def not_on(key: str, *values: str) -> LabelSelector:
    return (LabelConstraint(key, values, negated=True),)


CPU1 = {"CPU": 1}
# $/h of a node of each type of "mixed", at its cheapest offer.
MIXED_PRICES = {"small": 0.1, "gpu": 0.5, "big": 0.3}


@dataclass(frozen=True)
class Case:
    name: str
    cluster: str
    demand: Demand = field(default_factory=Demand)
    nodes: tuple[CurrentNode, ...] = ()
    max_workers: int | None = None  # Ray's top-level max_workers
    expect: Mapping[str, int] | None = None  # the counts, worked out by hand
    infeasible: tuple[str, ...] = ()  # Unmet.words() of demand that fits no node type
    capped: tuple[str, ...] = ()  # ... and of demand that the bounds leave out
    head: bool = True
    ray_only_types: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The $/h budget: a node of each type at its price, the launches within the allowance.
    prices: Mapping[str, float] | None = None
    allowance: float | None = None


def T(*shapes: ShapeCount) -> Demand:
    return Demand(tasks=shapes)


def G(*groups: PlacementGroup, also: tuple[ShapeCount, ...] = ()) -> Demand:
    return Demand(tasks=also, placement_groups=groups)


def R(requested: tuple[ShapeCount, ...], also: tuple[ShapeCount, ...] = ()) -> Demand:
    return Demand(tasks=also, requested=requested)


def cpu2(**kw: Any) -> CurrentNode:
    return worker("cpu", "cpu2", cpu=2, **kw)


CASES: list[Case] = [
    # -- tasks and actors on one CPU node type ----------------------------------------------
    Case("six-one-cpu-tasks-on-2-core-nodes", "cpu2", T(tasks(CPU1, 6)), expect={"cpu": 3}),
    Case("one-task", "cpu2", T(tasks(CPU1)), expect={"cpu": 1}),
    Case("seven-tasks-round-up", "cpu2", T(tasks(CPU1, 7)), expect={"cpu": 4}),
    Case(
        "thirteen-tasks-max-workers-6",
        "cpu2",
        T(tasks(CPU1, 13)),
        expect={"cpu": 6},
        capped=("{CPU: 1}",),
    ),
    Case("two-cpu-tasks", "cpu2", T(tasks({"CPU": 2}, 3)), expect={"cpu": 3}),
    Case("half-cpu-tasks", "cpu2", T(tasks({"CPU": 0.5}, 5)), expect={"cpu": 2}),
    Case("mixed-sizes", "cpu2", T(tasks({"CPU": 2}), tasks(CPU1, 3)), expect={"cpu": 3}),
    Case(
        "three-cpu-task-fits-no-node-type",
        "cpu2",
        T(tasks({"CPU": 3}), tasks(CPU1, 2)),
        expect={"cpu": 1},
        infeasible=("{CPU: 3}",),
    ),
    Case("no-demand-no-launch", "cpu2", Demand(), expect={}),
    Case(
        "actors-one-cpu-each",  # an actor is scheduled with 1 CPU unless it says otherwise
        "cpu2",
        T(tasks(CPU1, 4)),
        expect={"cpu": 2},
    ),
    Case(
        "actor-asking-memory-fits-no-node-type",  # cpu2 has no memory in its shape
        "cpu2",
        T(tasks({"CPU": 1, "memory": 1 * GB})),
        expect={},
        infeasible=("{CPU: 1, memory: 1000000000}",),
    ),
    # -- partial fits onto existing capacity --------------------------------------------------
    Case(
        "one-free-cpu-on-a-running-worker",
        "cpu2",
        T(tasks(CPU1, 3)),
        nodes=(cpu2(free_cpu=1),),
        expect={"cpu": 1},
    ),
    Case(
        "busy-workers-demand-is-an-increment",
        "cpu2",
        T(tasks(CPU1, 2)),
        nodes=(cpu2(free_cpu=0), cpu2(free_cpu=0), cpu2(free_cpu=0)),
        expect={"cpu": 1},
    ),
    Case("idle-worker-takes-it", "cpu2", T(tasks(CPU1, 2)), nodes=(cpu2(),), expect={}),
    Case("pending-slot-takes-it", "cpu2", T(tasks(CPU1, 2)), nodes=(pending("cpu"),), expect={}),
    Case(
        "pending-slot-takes-part",
        "cpu2",
        T(tasks(CPU1, 3)),
        nodes=(pending("cpu"),),
        expect={"cpu": 1},
    ),
    Case(
        "running-full-and-pending",
        "cpu2",
        T(tasks(CPU1, 5)),
        nodes=(cpu2(free_cpu=0), cpu2(free_cpu=0), pending("cpu")),
        expect={"cpu": 2},
    ),
    Case(
        "max-reached-a-pending-slot-takes-it",
        "cpu2",
        T(tasks(CPU1, 3)),
        nodes=(*[cpu2(free_cpu=0) for _ in range(4)], pending("cpu"), pending("cpu")),
        expect={},
    ),
    Case(
        "max-reached-by-busy-workers",
        "cpu2",
        T(tasks(CPU1, 2)),
        nodes=(*[cpu2(free_cpu=0) for _ in range(5)], cpu2(free_cpu=1)),
        expect={},
        capped=("{CPU: 1}",),
    ),
    Case(
        "half-free-cpus-across-workers",
        "cpu2",
        T(tasks({"CPU": 1.5}, 2)),
        nodes=(cpu2(free_cpu=0.5), cpu2(free_cpu=1.5)),
        expect={"cpu": 1},
    ),
    Case(
        # Ray (launch-config check off) raises KeyError on a running node whose type it is not
        # configured with; its oracle here is a type that exists but cannot grow, which is what
        # raypacking gives such a node.
        "running-worker-of-a-removed-node-type-still-counts",
        "cpu2",
        T(tasks(CPU1, 4)),
        nodes=(worker("old", "cpu2", cpu=4),),
        expect={},
        ray_only_types={"old": {"resources": {}, "max_workers": 1}},
    ),
    Case(
        # Ray marks the 2 workers above max_workers for termination and still packs demand onto
        # them in the same decision: nothing is launched.
        "workers-above-max-still-take-demand",
        "cpu2",
        T(tasks(CPU1, 16)),
        nodes=tuple(cpu2() for _ in range(8)),
        expect={},
    ),
    # -- request_resources --------------------------------------------------------------------
    Case("request-4-cpus", "cpu2", R(request_resources(num_cpus=4)), expect={"cpu": 2}),
    Case(
        "request-4-cpus-busy-nodes-count",  # the constraint is on totals, busy or not
        "cpu2",
        R(request_resources(num_cpus=4)),
        nodes=(cpu2(free_cpu=0), cpu2(free_cpu=0)),
        expect={},
    ),
    Case(
        "request-4-cpus-and-4-tasks",
        "cpu2",
        R(request_resources(num_cpus=4), also=(tasks(CPU1, 4),)),
        expect={"cpu": 2},
    ),
    Case(
        "request-bundles-one-idle-worker",
        "cpu2",
        R(request_resources(bundles=[{"CPU": 2}] * 3)),
        nodes=(cpu2(),),
        expect={"cpu": 2},
    ),
    Case(
        "request-an-impossible-bundle",
        "cpu2",
        R(request_resources(bundles=[{"CPU": 4}]), also=(tasks(CPU1, 2),)),
        expect={"cpu": 1},
        infeasible=("{CPU: 4}",),
    ),
    Case(
        "request-beyond-max-workers",
        "cpu2",
        R(request_resources(num_cpus=14)),
        expect={},
        capped=("{CPU: 1} x 14",),
    ),
    # -- placement groups ---------------------------------------------------------------------
    Case("pack-three-bundles", "cpu2", G(pg("p1", "PACK", CPU1, CPU1, CPU1)), expect={"cpu": 2}),
    Case(
        "spread-three-bundles",  # SPREAD is a preference: the autoscaler packs them
        "cpu2",
        G(pg("s1", "SPREAD", CPU1, CPU1, CPU1)),
        expect={"cpu": 2},
    ),
    Case(
        "strict-spread-two-bundles",
        "cpu2",
        G(pg("ss", "STRICT_SPREAD", CPU1, CPU1)),
        expect={"cpu": 2},
    ),
    Case(
        "strict-spread-three-bundles",
        "cpu2",
        G(pg("ss", "STRICT_SPREAD", CPU1, CPU1, CPU1)),
        expect={"cpu": 3},
    ),
    Case(
        "strict-pack-two-bundles",
        "cpu2",
        G(pg("sp", "STRICT_PACK", CPU1, CPU1)),
        expect={"cpu": 1},
    ),
    Case(
        "strict-pack-too-big-for-any-node",
        "cpu2",
        G(pg("sp", "STRICT_PACK", CPU1, CPU1, CPU1)),
        expect={},
        infeasible=("placement group sp (STRICT_PACK: {CPU: 1}, {CPU: 1}, {CPU: 1})",),
    ),
    Case(
        "strict-spread-beyond-max-is-all-or-nothing",
        "cpu2",
        G(pg("wide", "STRICT_SPREAD", *[CPU1] * 7)),
        expect={},
        capped=("placement group wide (STRICT_SPREAD: " + ", ".join(["{CPU: 1}"] * 7) + ")",),
    ),
    Case(
        "strict-spread-one-on-an-idle-worker",
        "cpu2",
        G(pg("ss", "STRICT_SPREAD", CPU1, CPU1)),
        nodes=(cpu2(),),
        expect={"cpu": 1},
    ),
    Case(
        "two-groups-and-tasks",
        "cpu2",
        G(
            pg("a", "STRICT_SPREAD", CPU1, CPU1),
            pg("b", "PACK", {"CPU": 2}),
            also=(tasks(CPU1, 2),),
        ),
        expect={"cpu": 3},  # the tasks take the CPU that group a leaves on its two nodes
    ),
    Case(
        "group-onto-a-pending-slot",
        "cpu2",
        G(pg("p", "STRICT_PACK", CPU1, CPU1)),
        nodes=(pending("cpu"),),
        expect={},
    ),
    Case(
        "one-group-fits-the-other-waits",
        "cpu2",
        G(
            pg("big", "STRICT_SPREAD", *[{"CPU": 2}] * 4),
            pg("small", "STRICT_SPREAD", CPU1, CPU1),
        ),
        max_workers=5,
        expect={"cpu": 4},
        capped=("placement group small (STRICT_SPREAD: {CPU: 1}, {CPU: 1})",),
    ),
    # -- the cluster's own max_workers ---------------------------------------------------------
    Case(
        "cluster-max-workers-2",
        "cpu2",
        T(tasks(CPU1, 6)),
        max_workers=2,
        expect={"cpu": 2},
        capped=("{CPU: 1} x 2",),
    ),
    Case(
        "cluster-max-workers-counts-running",
        "cpu2",
        T(tasks(CPU1, 6)),
        nodes=(cpu2(free_cpu=0),),
        max_workers=2,
        expect={"cpu": 1},
        capped=("{CPU: 1} x 4",),
    ),
    # -- min_workers ---------------------------------------------------------------------------
    Case("min-workers-with-no-demand", "cpu2-min1", Demand(), expect={"cpu": 1}),
    Case("one-task-lands-on-the-min-node", "cpu2-min1", T(tasks(CPU1)), expect={"cpu": 1}),
    Case("three-tasks-min-node-and-one", "cpu2-min1", T(tasks(CPU1, 3)), expect={"cpu": 2}),
    Case(
        "min-met-by-a-running-worker",
        "cpu2-min1",
        Demand(),
        nodes=(worker("cpu", "cpu2-min1", cpu=2),),
        expect={},
    ),
    Case("min-met-by-a-pending-slot", "cpu2-min1", Demand(), nodes=(pending("cpu"),), expect={}),
    Case(
        "min-met-demand-on-top",
        "cpu2-min1",
        T(tasks(CPU1, 4)),
        nodes=(worker("cpu", "cpu2-min1", cpu=2),),
        expect={"cpu": 1},
    ),
    # -- the simulator's example: a GPU node type that the issue calls "cpu" -------------------
    Case("local-sim-six-tasks", "local-sim", T(tasks(CPU1, 6)), expect={"cpu": 3}),
    Case("local-sim-one-gpu-task", "local-sim", T(tasks({"GPU": 1})), expect={"cpu": 1}),
    Case(
        "local-sim-two-gpus-in-one-task",
        "local-sim",
        T(tasks({"GPU": 2})),
        expect={"cpu": 1},  # the min worker, nothing for the task
        infeasible=("{GPU: 2}",),
    ),
    # -- mixed CPU, GPU and memory node types -------------------------------------------------
    # Ray's utilisation score ranks node types by their least used resource first: `small` has
    # memory in its shape that a CPU task leaves unused (least use 0), `big` only CPU, so one CPU
    # task launches the 15-CPU node. Ray does the same with these node types.
    Case("mixed-one-cpu-task", "mixed", T(tasks(CPU1)), expect={"big": 1}),
    Case("mixed-eight-cpu-tasks", "mixed", T(tasks(CPU1, 8)), expect={"big": 1}),
    Case("mixed-one-gpu-task", "mixed", T(tasks({"GPU": 1})), expect={"gpu": 1}),
    Case("mixed-gpu-tasks-4-cpus", "mixed", T(tasks({"CPU": 4, "GPU": 1}, 2)), expect={"gpu": 2}),
    Case("mixed-twelve-cpus", "mixed", T(tasks({"CPU": 12})), expect={"big": 1}),
    Case(
        "mixed-twenty-cpus-fits-nothing",
        "mixed",
        T(tasks({"CPU": 20})),
        expect={},
        infeasible=("{CPU: 20}",),
    ),
    Case(
        "mixed-memory-heavy-only-the-gpu-type-has-it",
        "mixed",
        T(tasks({"CPU": 1, "memory": 20 * GB})),
        expect={"gpu": 1},
    ),
    Case(
        "mixed-gpu-and-cpu-tasks",  # the GPU node's 8 CPUs take the CPU tasks too
        "mixed",
        T(tasks({"GPU": 1}), tasks(CPU1, 3)),
        expect={"gpu": 1},
    ),
    Case(
        "mixed-gpu-task-onto-a-free-gpu",
        "mixed",
        T(tasks({"GPU": 1})),
        nodes=(worker("gpu", "mixed", cpu=8, gpu=1),),
        expect={},
    ),
    Case(
        "mixed-strict-spread-gpu-bundles",
        "mixed",
        G(pg("g", "STRICT_SPREAD", {"GPU": 1}, {"GPU": 1})),
        expect={"gpu": 2},
    ),
    Case(
        "mixed-request-two-gpus",
        "mixed",
        R(request_resources(bundles=[{"GPU": 1}, {"GPU": 1}])),
        expect={"gpu": 2},
    ),
    Case(
        "mixed-four-gpus-beyond-max",
        "mixed",
        T(tasks({"GPU": 1}, 4)),
        expect={"gpu": 3},
        capped=("{GPU: 1}",),
    ),
    # -- GPU conservation ---------------------------------------------------------------------
    Case("cpu-task-avoids-the-first-gpu-type", "gpu-first", T(tasks(CPU1)), expect={"cpu": 1}),
    Case(
        "cpu-tasks-go-to-gpu-nodes-when-cpu-type-is-full",
        "gpu-first",
        T(tasks({"CPU": 4}, 3)),
        expect={"cpu": 2, "gpu": 1},
    ),
    Case("gpu-task-takes-the-gpu-type", "gpu-first", T(tasks({"GPU": 1})), expect={"gpu": 1}),
    Case(
        "cpu-task-onto-idle-gpu-worker-before-new-cpu-node",
        "gpu-first",
        T(tasks(CPU1)),
        nodes=(worker("gpu", "gpu-first", cpu=4, gpu=1),),
        expect={},
    ),
    # -- custom resources and labels ----------------------------------------------------------
    Case("custom-prep-tasks", "custom", T(tasks({"prep": 1}, 3)), expect={"prep": 3}),
    Case("custom-half-prep", "custom", T(tasks({"prep": 0.5}, 3)), expect={"prep": 2}),
    Case(
        "label-selects-a100",
        "custom",
        T(tasks(CPU1, 1, on("accelerator", "a100"))),
        expect={"a100": 1},
    ),
    Case(
        "label-not-a100",
        "custom",
        T(tasks(CPU1, 2, not_on("accelerator", "a100"))),
        expect={"prep": 1},
    ),
    Case(
        "label-selects-the-node-type",
        "custom",
        T(tasks(CPU1, 1, label_selector({"rv_node_type": "a100"}))),
        expect={"a100": 1},
    ),
    Case(
        "label-nobody-has",
        "custom",
        T(tasks(CPU1, 1, on("accelerator", "h100"))),
        expect={},
        infeasible=("{CPU: 1}",),
    ),
    Case(
        "label-fallback-to-the-second-selector",
        "custom",
        T(tasks(CPU1, 1, on("accelerator", "h100"), on("accelerator", "a100"))),
        expect={"a100": 1},
    ),
    Case(
        "label-in-either-node-type",
        "custom",
        T(tasks({"CPU": 8}, 3, label_selector({"rv_node_type": "in(prep,a100)"}))),
        expect={"prep": 3},  # GPU conservation keeps the A100s for GPU work
    ),
    Case(
        "placement-group-bundle-with-a-selector",
        "custom",
        G(pg("sel", "STRICT_SPREAD", Bundle({"CPU": 1}, on("accelerator", "a100")), CPU1)),
        expect={"a100": 1, "prep": 1},
    ),
    Case(
        "prep-and-gpu-demand-together",
        "custom",
        T(tasks({"prep": 1}, 2), tasks({"GPU": 1})),
        expect={"prep": 2, "a100": 1},
    ),
    # -- Ray's accelerator names (issue 24): `accelerator_type=` and label selectors on them --
    Case(
        "accelerator-type-a100",  # @ray.remote(num_gpus=1, accelerator_type="A100")
        "custom",
        T(tasks({"GPU": 1, "accelerator_type:A100": 0.001}, 2)),
        expect={"a100": 2},
    ),
    Case(
        "accelerator-type-nobody-has",
        "custom",
        T(tasks({"GPU": 1, "accelerator_type:H100": 0.001})),
        expect={},
        infeasible=("{GPU: 1, accelerator_type:H100: 0.001}",),
    ),
    Case(
        "accelerator-label-selector",  # label_selector={"ray.io/accelerator-type": "A100"}
        "custom",
        T(tasks(CPU1, 1, on("ray.io/accelerator-type", "A100"))),
        expect={"a100": 1},
    ),
    Case(
        "accelerator-label-selector-not-a100",
        "custom",
        T(tasks(CPU1, 2, not_on("ray.io/accelerator-type", "A100"))),
        expect={"prep": 1},
    ),
    # -- declared resources and labels --------------------------------------------------------
    Case("declared-three-cpu-tasks", "declared", T(tasks({"CPU": 3}, 2)), expect={"us": 2}),
    Case("declared-zone-us", "declared", T(tasks(CPU1, 2, on("zone", "us"))), expect={"us": 1}),
    Case("declared-zone-eu", "declared", T(tasks(CPU1, 5, on("zone", "eu"))), expect={"eu": 2}),
    Case("declared-two-gpus", "declared", T(tasks({"GPU": 1}, 2)), expect={"eu": 1}),
    Case(
        "declared-memory-on-eu-only",
        "declared",
        T(tasks({"CPU": 1, "memory": 4 * GB}, 3)),
        expect={"eu": 2},
    ),
    # -- one-GPU and four-GPU node types ------------------------------------------------------
    Case(
        "strict-pack-four-gpus",
        "two-gpu",
        G(pg("sp", "STRICT_PACK", *[{"GPU": 1}] * 4)),
        expect={"four": 1},
    ),
    Case("pack-four-gpus", "two-gpu", G(pg("p", "PACK", *[{"GPU": 1}] * 4)), expect={"four": 1}),
    Case("one-gpu-task-two-gpu-types", "two-gpu", T(tasks({"GPU": 1})), expect={"one": 1}),
    Case(
        "strict-spread-three-gpus",
        "two-gpu",
        G(pg("ss", "STRICT_SPREAD", *[{"GPU": 1}] * 3)),
        expect={"one": 3},
    ),
    Case(
        "eight-gpus-in-one-task",
        "two-gpu",
        T(tasks({"GPU": 8})),
        expect={},
        infeasible=("{GPU: 8}",),
    ),
    # -- tight bounds -------------------------------------------------------------------------
    Case(
        "bounded-ten-tasks",  # 2 x 2 CPUs, then the GPU node's 4 (nothing else fits)
        "bounded",
        T(tasks(CPU1, 10)),
        expect={"cpu": 2, "gpu": 1},
        capped=("{CPU: 1} x 2",),
    ),
    Case(
        "bounded-two-gpu-tasks",
        "bounded",
        T(tasks({"GPU": 1}, 2)),
        expect={"cpu": 1, "gpu": 1},
        capped=("{GPU: 1}",),
    ),
    Case(
        "bounded-cluster-max-below-min",  # min_workers first, as Ray does, then the cap
        "bounded",
        T(tasks(CPU1, 4)),
        max_workers=1,
        expect={"cpu": 1},
        capped=("{CPU: 1} x 2",),
    ),
    Case(
        "bounded-strict-spread-three",
        "bounded",
        G(pg("ss", "STRICT_SPREAD", CPU1, CPU1, CPU1)),
        expect={"cpu": 2, "gpu": 1},
    ),
    # -- a node type without CPU --------------------------------------------------------------
    Case("nocpu-cpu-task", "nocpu", T(tasks(CPU1)), expect={"cpu": 1}),
    Case("nocpu-gpu-only-task", "nocpu", T(tasks({"GPU": 1})), expect={"gpu": 1}),
    Case(
        "nocpu-gpu-task-needing-cpu",
        "nocpu",
        T(tasks({"CPU": 1, "GPU": 1})),
        expect={},
        infeasible=("{CPU: 1, GPU: 1}",),
    ),
    # -- the $/h budget, a bound inside Ray's packing (issue 24) ---------------------------------
    Case(
        # the spec lists small first: cut in spec order, the GPU task lost its node to CPU work
        "budget-the-gpu-task-keeps-its-node-when-cpu-types-come-first",
        "mixed",
        T(tasks({"GPU": 1}), tasks({"CPU": 4}, 3)),
        prices=MIXED_PRICES,
        allowance=0.5,
        expect={"gpu": 1},
        capped=("{CPU: 4}",),
    ),
    Case(
        "budget-a-type-the-money-cannot-buy-leaves-the-pool-the-others-go-on",
        "mixed",
        T(tasks({"GPU": 1}, 2), tasks({"CPU": 4}, 4)),
        prices=MIXED_PRICES,
        allowance=0.7,
        expect={"gpu": 1, "small": 2},
        capped=("{GPU: 1}",),
    ),
    Case(
        "budget-that-pays-for-everything-changes-nothing",
        "mixed",
        T(tasks({"GPU": 1}), tasks({"CPU": 4}, 6)),
        prices=MIXED_PRICES,
        allowance=10.0,
        expect={"gpu": 1, "big": 2},
    ),
    Case(
        "budget-of-nothing-rents-nothing",
        "cpu2",
        T(tasks(CPU1, 6)),
        prices={"cpu": 0.2},
        allowance=0.0,
        expect={},
        capped=("{CPU: 1} x 6",),
    ),
    Case(
        "budget-min-workers-first-never-cut",
        "cpu2-min1",
        T(tasks(CPU1, 6)),
        prices={"cpu": 0.2},
        allowance=0.0,
        expect={"cpu": 1},
        capped=("{CPU: 1} x 4",),
    ),
    Case(
        "budget-for-two-of-three",
        "cpu2",
        T(tasks(CPU1, 6)),
        prices={"cpu": 0.2},
        allowance=0.45,
        expect={"cpu": 2},
        capped=("{CPU: 1} x 2",),
    ),
    Case(
        "budget-and-cluster-max-the-tighter-wins",
        "cpu2",
        T(tasks(CPU1, 8)),
        max_workers=2,
        prices={"cpu": 0.2},
        allowance=0.65,
        expect={"cpu": 2},
        capped=("{CPU: 1} x 4",),
    ),
    Case(
        "budget-pending-nodes-are-paid-for-already",
        "cpu2",
        T(tasks(CPU1, 6)),
        nodes=(pending("cpu"), pending("cpu")),
        prices={"cpu": 0.2},
        allowance=0.2,
        expect={"cpu": 1},
    ),
    Case(
        "budget-a-group-placed-whole-or-not-at-all",
        "cpu2",
        G(pg("ss", "STRICT_SPREAD", CPU1, CPU1, CPU1), also=(tasks(CPU1, 2),)),
        prices={"cpu": 0.2},
        allowance=0.5,
        expect={"cpu": 1},
        capped=("placement group ss (STRICT_SPREAD: {CPU: 1}, {CPU: 1}, {CPU: 1})",),
    ),
    # -- without a head in the picture --------------------------------------------------------
    Case("headless-six-tasks", "cpu2", T(tasks(CPU1, 6)), expect={"cpu": 3}, head=False),
]


# -- the oracle: Ray, configured the Ray way --------------------------------------------------

PENDING_STATUSES = (
    Instance.QUEUED,
    Instance.REQUESTED,
    Instance.ALLOCATED,
    Instance.RAY_INSTALLING,
)


def ray_config(case: Case) -> AutoscalingConfig:
    available: dict[str, Any] = {
        "head": {"resources": {}, "node_config": {}, "min_workers": 0, "max_workers": 0}
    }
    for name, body in CLUSTERS[case.cluster].ray.items():
        available[name] = {"node_config": {}, "min_workers": 0, **copy.deepcopy(body)}
    for name, body in case.ray_only_types.items():
        available[name] = {"node_config": {}, "min_workers": 0, **copy.deepcopy(dict(body))}
    return AutoscalingConfig(
        {
            "cluster_name": case.cluster,
            "provider": {"type": "readonly"},
            "head_node_type": "head",
            "max_workers": 1000 if case.max_workers is None else case.max_workers,
            "available_node_types": available,
        },
        skip_content_hash=True,
    )


def ray_instance(index: int, node: CurrentNode, configs: Mapping[str, Any]) -> AutoscalerInstance:
    config = configs.get(node.node_type)
    hash_ = config.launch_config_hash if config else "a-config-since-removed"
    kind = NodeKind.HEAD if node.head else NodeKind.WORKER
    iid = f"i-{index}"
    if not node.running:
        status = PENDING_STATUSES[index % len(PENDING_STATUSES)]
        im = Instance(
            instance_id=iid,
            instance_type=node.node_type,
            status=status,
            node_kind=kind,
            launch_config_hash=hash_,
        )
        return AutoscalerInstance(im_instance=im)
    node_id = f"{index + 1:056x}"
    state = NodeState(
        node_id=bytes.fromhex(node_id),
        instance_id=iid,
        ray_node_type_name=node.node_type,
        total_resources=dict(node.total or {}),
        available_resources=dict(node.available or node.total or {}),
        labels=dict(node.labels),
        status=NodeStatus.RUNNING,
    )
    im = Instance(
        instance_id=iid,
        instance_type=node.node_type,
        status=Instance.RAY_RUNNING,
        node_kind=kind,
        node_id=node_id,
        cloud_instance_id=iid,
        launch_config_hash=hash_,
    )
    return AutoscalerInstance(im_instance=im, ray_node=state, cloud_instance_id=iid)


def ray_selectors(selectors: tuple[LabelSelector, ...]) -> list[list[tuple[str, int, list[str]]]]:
    return [
        [
            (
                c.key,
                LabelSelectorOperator.LABEL_OPERATOR_NOT_IN
                if c.negated
                else LabelSelectorOperator.LABEL_OPERATOR_IN,
                list(c.values),
            )
            for c in selector
        ]
        for selector in selectors
    ]


def ray_gang(group: PlacementGroup) -> GangResourceRequest:
    """As the GCS reports a pending placement group (gcs_autoscaler_state_manager.cc)."""
    kinds = ResourceRequestUtil.PlacementConstraintType
    constraint = {
        "STRICT_SPREAD": [(kinds.ANTI_AFFINITY, f"_PG_{group.id}", "")],
        "STRICT_PACK": [(kinds.AFFINITY, f"_PG_{group.id}", "")],
    }.get(group.strategy)

    def one(bundle: Bundle) -> Any:
        selectors = ray_selectors((bundle.label_selector,)) if bundle.label_selector else None
        return ResourceRequestUtil.make(dict(bundle.resources), constraint, selectors)

    return GangResourceRequest(
        requests=[one(b) for b in group.bundles],
        details=f"{group.id}:{group.strategy}|PENDING",
        bundle_selectors=[BundleSelector(resource_requests=[one(b) for b in group.bundles])],
    )


@dataclass
class RayAnswer:
    launches: dict[str, int]
    unplaced_tasks: Counter[str] = field(default_factory=Counter)
    unplaced_groups: set[str] = field(default_factory=set)
    unplaced_constraint: bool = False


def oracle(case: Case) -> RayAnswer:
    """Ray's answer; under a budget, Ray's own loop walked one node at a time: the cap raised
    by one node while the launches stay within the allowance, and a node type whose next node
    they cannot pay for bounded where it stands (Ray's way of leaving a node type out of the
    pool), until the launches stop growing. The subject finds the same point by halving."""
    if case.allowance is None:
        return ray_run(case)
    prices = case.prices or {}
    held: dict[str, int] = {}
    existing = len(case.nodes) + (1 if case.head else 0)
    cost = lambda a: sum(prices.get(t, 0.0) * n for t, n in a.launches.items())  # noqa: E731
    mins = {name: body.get("min_workers", 0) for name, body in CLUSTERS[case.cluster].ray.items()}
    have = Counter(x.node_type for x in case.nodes)
    n = existing + sum(max(0, m - have[t]) for t, m in mins.items())  # min_workers: never cut
    last = ray_run(case, max_num_nodes=n, held=held)
    while True:
        tried = ray_run(case, max_num_nodes=n + 1, held=held)
        if tried.launches == last.launches:
            return last  # nothing more to launch under these bounds
        if cost(tried) <= case.allowance + 1e-9:
            last, n = tried, n + 1
            continue
        grown = [t for t, c in tried.launches.items() if c > last.launches.get(t, 0)]
        if all(t in held for t in grown):
            return last
        for t in grown:
            held[t] = have[t] + last.launches.get(t, 0)


def ray_run(
    case: Case, *, max_num_nodes: int | None = None, held: Mapping[str, int] | None = None
) -> RayAnswer:
    config = ray_config(case)
    configs = config.get_node_type_configs()
    for name, most in (held or {}).items():
        configs[name].max_worker_nodes = min(configs[name].max_worker_nodes, most)
    cap = config.get_max_num_nodes()
    if max_num_nodes is not None:
        cap = min(cap, max_num_nodes) if cap is not None else max_num_nodes
    nodes = ((HEAD,) if case.head else ()) + case.nodes
    by_count = [
        ResourceRequestByCount(
            request=ResourceRequestUtil.make(
                dict(s.resources), None, ray_selectors(s.label_selectors)
            ),
            count=s.count,
        )
        for s in case.demand.tasks
    ]
    requested = [
        ResourceRequestByCount(
            request=ResourceRequestUtil.make(
                dict(s.resources), None, ray_selectors(s.label_selectors)
            ),
            count=s.count,
        )
        for s in case.demand.requested
    ]
    request = SchedulingRequest(
        # As KubeRay runs autoscaler v2. With the check on, Ray 2.60 judges every pending
        # instance outdated (SchedulingNode.from_node_config drops its launch-config hash),
        # terminates it and launches a replacement: see test_rays_launch_config_check_quirk.
        disable_launch_config_check=True,
        node_type_configs=configs,
        max_num_nodes=cap,
        resource_requests=by_count,
        gang_resource_requests=[ray_gang(g) for g in case.demand.placement_groups],
        cluster_resource_constraints=(
            [ClusterResourceConstraint(resource_requests=requested)] if requested else []
        ),
        current_instances=[ray_instance(i, n, configs) for i, n in enumerate(nodes)],
    )
    reply = ResourceDemandScheduler().schedule(request)
    answer = RayAnswer({lr.instance_type: lr.count for lr in reply.to_launch})
    for r in reply.infeasible_resource_requests:
        answer.unplaced_tasks[shape_key(dict(r.resources_bundle))] += 1
    answer.unplaced_groups = {
        g.details.split(":")[0] for g in reply.infeasible_gang_resource_requests
    }
    answer.unplaced_constraint = bool(reply.infeasible_cluster_resource_constraints)
    return answer


def shape_key(resources: Mapping[str, float]) -> str:
    return repr(sorted((k, float(v)) for k, v in resources.items()))


# -- the subject: ray-vast's path --------------------------------------------------------------


def subject(case: Case) -> raypacking.Packing:
    cluster = load_cluster(case.cluster)
    nodes = ((HEAD,) if case.head else ()) + case.nodes
    return pack(
        type_shapes(cluster),
        nodes,
        case.demand,
        max_workers=case.max_workers,
        prices=case.prices,
        allowance=case.allowance,
    )


# -- the tests -------------------------------------------------------------------------------


def test_ray_is_the_version_the_corpus_was_checked_against() -> None:
    """raypacking hands the decision to Ray's scheduler, private helpers included: on another
    Ray, rerun this corpus, read Ray's scheduler.py changes, then move the pin."""
    assert ray.__version__ == TESTED_RAY_VERSION, (
        f"Ray {ray.__version__} is installed but raypacking was checked against Ray "
        f"{TESTED_RAY_VERSION}: check the corpus and Ray's autoscaler/v2/scheduler.py, then "
        "update TESTED_RAY_VERSION"
    )


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", sorted(CLUSTERS))
def test_spec_shapes_are_the_hand_written_ray_node_types(name: str) -> None:
    """ray-vast's derivation from the spec gives what a Ray user would write by hand."""
    cluster = load_cluster(name)
    derived = {
        t.name: {
            "resources": dict(t.resources),
            "labels": dict(t.labels),
            "min_workers": t.min_workers,
            "max_workers": t.max_workers,
        }
        for t in type_shapes(cluster)
    }
    by_hand = {
        t: {
            "resources": {k: float(v) for k, v in body["resources"].items()},
            "labels": body["labels"],
            "min_workers": body.get("min_workers", 0),
            "max_workers": body["max_workers"],
        }
        for t, body in CLUSTERS[name].ray.items()
    }
    assert derived == by_hand
    assert list(derived) == list(by_hand)  # the order too: Ray breaks ties by it


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ray_vast_launches_what_ray_launches(case: Case) -> None:
    ray_says = oracle(case)
    ours = subject(case)
    assert dict(ours.launches) == ray_says.launches
    if case.expect is not None:
        assert ray_says.launches == dict(case.expect)
    unmet = ours.infeasible + ours.capped
    tasks_left: Counter[str] = Counter()
    for u in unmet:
        if u.kind == "tasks":
            tasks_left[shape_key(u.bundles[0])] += u.count
    assert tasks_left == ray_says.unplaced_tasks
    assert {u.placement_group for u in unmet if u.kind == "placement_group"} == (
        ray_says.unplaced_groups
    )
    assert any(u.kind == "request_resources" for u in unmet) == ray_says.unplaced_constraint
    assert sorted(u.words() for u in ours.infeasible) == sorted(case.infeasible)
    assert sorted(u.words() for u in ours.capped) == sorted(case.capped)


# -- the packing's own edges ---------------------------------------------------------------------


def test_rays_launch_config_check_quirk() -> None:
    """Why raypacking (and the oracle) turn Ray's launch-config check off: with it on, Ray 2.60
    marks a pending instance OUTDATED even when its hash is the config's, so it neither counts
    it for min_workers nor keeps it, and launches another. On a Ray that fixes this, this test
    fails: the check could then be left on."""
    case = Case("quirk", "cpu2-min1", Demand(), nodes=(pending("cpu"),))
    config = ray_config(case)
    configs = config.get_node_type_configs()
    instances = [ray_instance(i, n, configs) for i, n in enumerate((HEAD, *case.nodes))]
    replies = {
        check: ResourceDemandScheduler().schedule(
            SchedulingRequest(
                disable_launch_config_check=not check,
                node_type_configs=configs,
                max_num_nodes=config.get_max_num_nodes(),
                current_instances=instances,
            )
        )
        for check in (True, False)
    }
    assert [(r.instance_type, r.count) for r in replies[True].to_launch] == [("cpu", 1)]
    assert [t.instance_id for t in replies[True].to_terminate] == ["i-1"]
    assert not replies[False].to_launch and not replies[False].to_terminate


def test_without_an_allowance_the_packing_is_rays() -> None:
    """Ray has no budget: without an allowance `pack` launches what Ray would even when the
    spec's max_dollars_per_hour could not pay for it (the planner passes the $/h left)."""
    text = spec_text("cpu2").replace("max_dollars_per_hour: 50", "max_dollars_per_hour: 0.01")
    cluster = load_spec(text, "cheap.yaml")
    packing = pack(type_shapes(cluster), [HEAD], T(tasks(CPU1, 6)))
    assert dict(packing.launches) == {"cpu": 3}


def test_a_pending_node_no_demand_needs_is_reported_as_ray_would_end_it() -> None:
    """Ray ends a pending node that no demand needs ("pending and not needed"); min_workers
    keeps what it needs. The planner counts only the pending nodes Ray needs."""
    shapes = type_shapes(load_cluster("cpu2-min1"))
    three = [HEAD, pending("cpu"), pending("cpu"), pending("cpu")]
    assert dict(pack(shapes, three, Demand()).unneeded) == {"cpu": 2}  # one kept for min_workers
    assert dict(pack(shapes, three, T(tasks(CPU1, 3))).unneeded) == {"cpu": 1}
    assert dict(pack(shapes, three, T(tasks(CPU1, 6))).unneeded) == {}


def test_a_pending_node_of_known_shape_counts_at_that_shape() -> None:
    """An offer (or an enrolled agent) may say a pending node has more than its type's bound:
    4 CPUs rather than 2, so 4 tasks fit it."""
    shapes = type_shapes(load_cluster("cpu2"))
    known = CurrentNode("cpu", running=False, total={"CPU": 4})
    assert dict(pack(shapes, [HEAD, known], T(tasks(CPU1, 4))).launches) == {}
    assert dict(pack(shapes, [HEAD, pending("cpu")], T(tasks(CPU1, 4))).launches) == {"cpu": 1}


def test_max_workers_caps_workers_not_the_head() -> None:
    shapes = type_shapes(load_cluster("cpu2"))
    assert dict(pack(shapes, [HEAD], T(tasks(CPU1, 6)), max_workers=1).launches) == {"cpu": 1}
    assert dict(pack(shapes, [], T(tasks(CPU1, 6)), max_workers=1).launches) == {"cpu": 1}


def test_infeasible_in_rays_words() -> None:
    shapes = type_shapes(load_cluster("local-sim"))
    packing = pack(shapes, [HEAD], T(tasks({"GPU": 2}, 3), tasks({"TPU": 1, "CPU": 1})))
    assert sorted(u.words() for u in packing.infeasible) == ["{CPU: 1, TPU: 1}", "{GPU: 2} x 3"]
    assert packing.ray_version == ray.__version__


def test_label_selector_reads_rays_syntax() -> None:
    assert label_selector({"zone": "eu", "tier": "!spot", "gpu": "in(a100, h100)"}) == (
        LabelConstraint("zone", ("eu",)),
        LabelConstraint("tier", ("spot",), negated=True),
        LabelConstraint("gpu", ("a100", "h100")),
    )
    assert label_selector({"gpu": "!in(t4,v100)"})[0].matches({"gpu": "a100"})
    assert label_selector({"gpu": "!in(t4,v100)"})[0].matches({})
    assert not label_selector({"gpu": "a100"})[0].matches({})


def test_request_resources_counts_bundles_as_rays_sdk_does() -> None:
    assert request_resources(num_cpus=3, bundles=[{"GPU": 1}, {"GPU": 1}]) == (
        ShapeCount({"CPU": 1.0}, 3),
        ShapeCount({"GPU": 1.0}, 2),
    )
    (selected,) = request_resources(bundles=[{"CPU": 1}], bundle_label_selectors=[{"z": "eu"}])
    assert selected.label_selectors == ((LabelConstraint("z", ("eu",)),),)


def test_unmet_words() -> None:
    assert Unmet("tasks", ({"CPU": 1.0, "memory": 2.5},), 2).words() == "{CPU: 1, memory: 2.5} x 2"


def test_bad_input_is_refused_before_ray_sees_it() -> None:
    with pytest.raises(ValueError, match="running node"):
        CurrentNode("cpu", running=True)
    with pytest.raises(ValueError, match="placement strategy"):
        PlacementGroup("x", "SOMEWHERE", ())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_workers"):
        pack([TypeShape("cpu", {"CPU": 1}, {}, 3, 2)], [], Demand())
