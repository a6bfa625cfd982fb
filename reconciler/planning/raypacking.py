"""Demand becomes nodes the way Ray's own autoscaler computes it (DESIGN.md 10).

ray-vast does not re-implement Ray's packing: it asks Ray. `pack` hands the cluster and the
demand to autoscaler v2's `ResourceDemandScheduler.schedule`, the pure decision at the heart of
Ray's autoscaler (no process, no GCS, no cloud call), and reads back the nodes to launch per node
type and what stays unplaced. So every rule is Ray's exactly, including those nobody would think
to copy: min_workers first, then the request_resources constraint against total capacity, then
placement groups all-or-nothing (STRICT_PACK as one combined request, STRICT_SPREAD by
anti-affinity), then tasks and actors sorted as Ray sorts them; existing nodes (running, then
pending) before new ones; among new ones, Ray's utilisation score with its GPU conservation (a
GPU node only when nothing else fits or the demand asks for GPUs) and label selectors.

What this module adds is the translation, done as Ray's own pieces do it:

- node types become `NodeTypeConfig`s, as `AutoscalingConfig.get_node_type_configs` makes them
  from `available_node_types`; Ray's head gets a node type of its own that is never launched,
  and so does a running worker whose node type the spec no longer has;
- running nodes become `AutoscalerInstance`s in RAY_RUNNING with the `NodeState` Ray's GCS would
  report; pending ones are ALLOCATED instances, which Ray counts at their node type's shape (or,
  given their known total, as nodes of that total);
- placement groups become `GangResourceRequest`s as the GCS builds them
  (`GetPendingGangResourceRequests`: a `_PG_<id>` affinity for STRICT_PACK, anti-affinity for
  STRICT_SPREAD, nothing for PACK and SPREAD); `request_resources` becomes the one
  `ClusterResourceConstraint`.

Ray is imported inside `pack` only (it is heavy, and the rest of `reconciler.planning` stays free
of it; tests/layering/layers.py allows exactly this). Ray's scheduler uses private helpers that
change between releases, so the Ray it was checked against is pinned below and the corpus
(tests/planning/test_ray_packing_corpus.py) fails loudly on another one.

Ray's scheduler logs at INFO on `ray.autoscaler.v2.scheduler` (e.g. "Adding 1 nodes to satisfy
min count"); the caller's logging decides whether that is shown.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.model.demand import (
    Bundle,
    CurrentNode,
    Demand,
    LabelSelector,
    Packing,
    PlacementGroup,
    ShapeCount,
    TypeShape,
    launches_of,
)
from reconciler.planning import cheapest, packbudget, packmemo, rayunmet
from reconciler.planning.packmemo import Question
from reconciler.planning.rayunmet import positive

# Ray's kPlacementGroupConstraintKeyPrefix: the label a placement group's bundles share.
PG_LABEL_PREFIX = "_PG_"


def pack(
    node_types: Sequence[TypeShape],
    nodes: Sequence[CurrentNode],
    demand: Demand,
    *,
    max_workers: int | None = None,
    prices: Mapping[str, float] | None = None,
    allowance: float | None = None,
    cheapest: Mapping[str, float] | None = None,
) -> Packing:
    """The nodes Ray's autoscaler would launch per node type for `demand`, given the node types
    (in spec order: Ray breaks ties by it) and the current nodes; `max_workers` caps the workers
    of the whole cluster as Ray's top-level `max_workers` does (the head is not counted).

    `allowance` is the $/h the launches may add, a node of each type priced at `prices` (its
    cheapest acceptable offer): the budget is a bound inside Ray's packing, applied the way Ray
    applies a node type's `max_workers`. Ray launches its best-scoring node, then the next; a
    node type with no room left leaves the pool and the others go on. Here a node type whose
    next node the money left cannot buy leaves the pool the same way, at the point Ray's own
    order reaches it. `min_workers` of every node type come first and are never cut, as Ray
    enforces them before any bound.

    `cheapest` (a cluster's `scheduling: cheapest`): the $/h of each node type's cheapest
    acceptable offer (a type with none left out); a new node is then picked by its price per
    request served, not by Ray's score (planning/cheapest.py), and the packing says each pick."""

    def asking(prices: Mapping[str, float] | None, allowance: float | None) -> Question:
        return Question.of(node_types, nodes, demand, max_workers, prices, allowance, cheapest)

    free = packmemo.answer(asking(None, None), _packed)
    if allowance is None or packbudget.cost(free.launches, prices) <= allowance + 1e-9:
        return free
    return packmemo.answer(asking(prices, allowance), _packed)


def _packed(asked: Question) -> Packing:
    node_types, nodes, demand = asked.node_types, asked.nodes, asked.demand
    prices, allowance = asked.prices, asked.allowance
    ray = _Ray()
    configs = ray.node_type_configs(node_types, nodes)
    heads = sum(1 for n in nodes if n.head)
    cap = None if asked.max_workers is None else asked.max_workers + heads

    def run(limit: int | None, held: Mapping[str, int]) -> tuple[Any, Mapping[str, int]]:
        if asked.cheapest is None:
            reply, launches = _schedule(ray, configs, held, node_types, nodes, demand, limit)
            return (reply, ()), launches
        with cheapest.priced(ray.scheduler, asked.cheapest) as choices:
            reply, launches = _schedule(ray, configs, held, node_types, nodes, demand, limit)
        return (reply, choices), launches

    reply, launches = run(cap, {})
    if allowance is not None and packbudget.cost(launches, prices) > allowance + 1e-9:
        reply, launches = packbudget.within(
            run, cap, nodes, _floor(node_types, nodes), prices or {}, allowance
        )
    reply, choices = reply
    worker_configs = [configs[t.name] for t in node_types]
    infeasible, capped = rayunmet.unmet(ray, reply, demand, worker_configs)
    return Packing(
        launches,
        tuple(infeasible),
        tuple(capped),
        ray.version,
        unneeded=rayunmet.unneeded(ray, reply),
        choices=tuple(choices),
    )


def _floor(node_types: Sequence[TypeShape], nodes: Sequence[CurrentNode]) -> int:
    """The nodes there and those `min_workers` launches: Ray's cap must not go below it."""
    have = Counter(n.node_type for n in nodes if not n.head)
    return len(nodes) + sum(max(0, t.min_workers - have[t.name]) for t in node_types)


def _schedule(  # noqa: PLR0917 - one run of Ray's scheduler takes all it decides on
    ray: _Ray,
    configs: Mapping[str, Any],
    held: Mapping[str, int],
    node_types: Sequence[TypeShape],
    nodes: Sequence[CurrentNode],
    demand: Demand,
    max_num_nodes: int | None,
) -> tuple[Any, Mapping[str, int]]:
    """One run of Ray's scheduler, the node types in `held` bounded at that many nodes: its
    reply, and the launches per worker node type."""
    bounded = {name: copy.deepcopy(c) for name, c in configs.items()}
    for name, most in held.items():
        bounded[name].max_worker_nodes = min(bounded[name].max_worker_nodes, most)
    request = ray.SchedulingRequest(
        # As KubeRay runs autoscaler v2. With the check on, Ray 2.60 takes every pending
        # instance for outdated (SchedulingNode.from_node_config drops its launch-config hash)
        # and launches a replacement; it also warns about the head on every call.
        disable_launch_config_check=True,
        node_type_configs=bounded,
        max_num_nodes=max_num_nodes,
        # Ray marks a pending node that no demand needs for termination once it has been
        # unneeded longer than this; below zero, every unneeded one is marked now (`unneeded`).
        pending_idle_timeout_s=_UNNEEDED_NOW,
        resource_requests=[ray.by_count(s) for s in demand.tasks if s.count > 0],
        gang_resource_requests=[ray.gang(pg) for pg in demand.placement_groups if pg.bundles],
        cluster_resource_constraints=ray.constraints(demand.requested),
        current_instances=[ray.instance(i, n) for i, n in enumerate(nodes)],
    )
    reply = ray.ResourceDemandScheduler(event_logger=None).schedule(request)
    workers = {t.name for t in node_types}
    launches = launches_of(
        (lr.instance_type, int(lr.count)) for lr in reply.to_launch if lr.instance_type in workers
    )
    return reply, launches


# See `_schedule`: Ray's pending idle timeout, set so that every unneeded pending node is marked.
_UNNEEDED_NOW = -1.0


class _Ray:
    """Ray's autoscaler types, imported when the first packing is asked for."""

    # Ray's generated protobuf modules have no static types: everything of Ray's is Any here.
    def __init__(self) -> None:
        import ray  # noqa: PLC0415 - the one lazy import of Ray in the core
        from ray.autoscaler.v2 import scheduler  # noqa: PLC0415
        from ray.autoscaler.v2.instance_manager import config  # noqa: PLC0415
        from ray.autoscaler.v2.schema import AutoscalerInstance  # noqa: PLC0415
        from ray.autoscaler.v2.utils import ResourceRequestUtil  # noqa: PLC0415
        from ray.core.generated import (  # noqa: PLC0415
            autoscaler_pb2,
            common_pb2,
            instance_manager_pb2,
        )

        self.version = str(ray.__version__)
        self.scheduler: Any = scheduler
        self.SchedulingRequest: Any = scheduler.SchedulingRequest
        self.ResourceDemandScheduler: Any = scheduler.ResourceDemandScheduler
        self.NodeTypeConfig: Any = config.NodeTypeConfig
        self.AutoscalerInstance: Any = AutoscalerInstance
        self.ResourceRequestUtil: Any = ResourceRequestUtil
        self.pb: Any = autoscaler_pb2
        self.common: Any = common_pb2
        self.im: Any = instance_manager_pb2

    # -- the cluster ------------------------------------------------------------------------

    def node_type_configs(
        self, node_types: Sequence[TypeShape], nodes: Sequence[CurrentNode]
    ) -> dict[str, Any]:
        configs: dict[str, Any] = {}
        for t in node_types:
            if t.min_workers > t.max_workers or t.min_workers < 0:
                raise ValueError(f"node type {t.name}: min_workers above max_workers")
            configs[t.name] = self.NodeTypeConfig(
                name=t.name,
                min_worker_nodes=t.min_workers,
                max_worker_nodes=t.max_workers,
                resources=positive(t.resources),
                labels=dict(t.labels),
            )
        # Ray's head node type holds the head and is never launched: as AutoscalingConfig does,
        # its max counts the head on top of its workers.
        for head in (n for n in nodes if n.head):
            known = configs.get(head.node_type)
            if known is None:
                configs[head.node_type] = self.NodeTypeConfig(
                    name=head.node_type,
                    min_worker_nodes=0,
                    max_worker_nodes=1,
                    resources=positive(head.total or {}),
                    labels=dict(head.labels),
                )
            else:
                known.max_worker_nodes += 1
        # A running worker whose node type the spec no longer has keeps its capacity for Ray,
        # as Ray's scheduler keeps an outdated node's until it is gone; none of its type is
        # launched. (A pending one of such a type is not counted, as in Ray.)
        gone = Counter(n.node_type for n in nodes if n.running and n.node_type not in configs)
        for name, count in gone.items():
            configs[name] = self.NodeTypeConfig(
                name=name, min_worker_nodes=0, max_worker_nodes=count, resources={}, labels={}
            )
        return configs

    def instance(self, index: int, node: CurrentNode) -> Any:
        im = self.im
        instance_id = node.node_id or f"rv-node-{index}"
        kind = im.NodeKind.HEAD if node.head else im.NodeKind.WORKER
        if not node.running and node.total is None:
            # Not in Ray yet: Ray's autoscaler counts it at its node type's shape.
            pending = im.Instance(
                instance_id=instance_id,
                instance_type=node.node_type,
                status=im.Instance.ALLOCATED,
                node_kind=kind,
                cloud_instance_id=instance_id,
            )
            return self.AutoscalerInstance(im_instance=pending, cloud_instance_id=instance_id)
        ray_node_id = f"{index:056x}"
        total = positive(node.total or {})
        available = total if node.available is None else positive(node.available)
        state = self.pb.NodeState(
            node_id=bytes.fromhex(ray_node_id),
            instance_id=instance_id,
            ray_node_type_name=node.node_type,
            total_resources=total,
            available_resources=available,
            labels=dict(node.labels),
            idle_duration_ms=node.idle_ms,
            status=self.pb.NodeStatus.IDLE if node.idle_ms else self.pb.NodeStatus.RUNNING,
        )
        running = im.Instance(
            instance_id=instance_id,
            instance_type=node.node_type,
            status=im.Instance.RAY_RUNNING,
            node_kind=kind,
            node_id=ray_node_id,
            cloud_instance_id=instance_id,
        )
        return self.AutoscalerInstance(
            im_instance=running, ray_node=state, cloud_instance_id=instance_id
        )

    # -- the demand -------------------------------------------------------------------------

    def request(
        self,
        resources: Mapping[str, float],
        selectors: Sequence[LabelSelector] = (),
        constraint: Any = None,
    ) -> Any:
        req = self.pb.ResourceRequest(resources_bundle=positive(resources))
        for selector in selectors:
            req.label_selectors.append(self.selector(selector))
        if constraint is not None:
            req.placement_constraints.append(constraint)
        return req

    def selector(self, selector: LabelSelector) -> Any:
        ops = self.common.LabelSelectorOperator
        return self.common.LabelSelector(
            label_constraints=[
                self.common.LabelSelectorConstraint(
                    label_key=c.key,
                    operator=ops.LABEL_OPERATOR_NOT_IN if c.negated else ops.LABEL_OPERATOR_IN,
                    label_values=list(c.values),
                )
                for c in selector
            ]
        )

    def by_count(self, shape: ShapeCount) -> Any:
        return self.pb.ResourceRequestByCount(
            request=self.request(shape.resources, shape.label_selectors), count=shape.count
        )

    def gang(self, pg: PlacementGroup) -> Any:
        """As the GCS reports a pending placement group (GetPendingGangResourceRequests)."""
        label = PG_LABEL_PREFIX + pg.id
        constraint = None
        if pg.strategy == "STRICT_SPREAD":
            constraint = self.pb.PlacementConstraint(
                anti_affinity=self.pb.AntiAffinityConstraint(label_name=label, label_value="")
            )
        elif pg.strategy == "STRICT_PACK":
            constraint = self.pb.PlacementConstraint(
                affinity=self.pb.AffinityConstraint(label_name=label, label_value="")
            )

        def one(bundle: Bundle) -> Any:
            selectors = (bundle.label_selector,) if bundle.label_selector else ()
            return self.request(bundle.resources, selectors, constraint)

        return self.pb.GangResourceRequest(
            requests=[one(b) for b in pg.bundles],
            details=f"{pg.id}:{pg.strategy}|PENDING",
            bundle_selectors=[
                self.pb.BundleSelector(resource_requests=[one(b) for b in pg.bundles])
            ],
        )

    def constraints(self, requested: Sequence[ShapeCount]) -> list[Any]:
        wanted = [self.by_count(s) for s in requested if s.count > 0]
        return [self.pb.ClusterResourceConstraint(resource_requests=wanted)] if wanted else []
