"""Ray's report, read from its GCS into the pure types the planner packs (issue 15).

What Ray's autoscaler reads (`get_cluster_resource_state`: pending tasks and actors by shape,
pending placement groups, the `request_resources()` constraint, and every node with its total and
available resources and labels) becomes the pure `model.demand` types: a `Demand` and Ray's live
nodes: a `RayReport`, which the observation carries as read. How many nodes of each type it needs
is the planner's (`planning/raydemand.py`, Ray's own `ResourceDemandScheduler`); this module only
reads.

`request_resources()` is kept where the head's autoscaler version puts it: in the cluster
resource state under autoscaler v2, and in the GCS key-value store (`V1_REQUEST_KEY`, a JSON list
of bundles) under v1, which is what `ray start --head` runs unless `RAY_enable_autoscaler_v2=1`
(ray-vast's own heads among them). The reader reads the key when the state has no constraint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from reconciler.model.demand import (
    NODE_TYPE_LABEL,
    Bundle,
    CurrentNode,
    Demand,
    LabelConstraint,
    LabelSelector,
    PlacementGroup,
    RayReport,
    ShapeCount,
    Strategy,
    request_resources,
)

# autoscaler_pb2.NodeStatus: a DEAD or DRAINING node is no capacity.
_GONE = frozenset({2, 4})
_NOT_IN = 2  # LabelSelectorOperator.LABEL_OPERATOR_NOT_IN
_STRATEGIES: tuple[Strategy, ...] = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
# Where autoscaler v1 keeps the `request_resources()` constraint (ray_constants
# AUTOSCALER_RESOURCE_REQUEST_CHANNEL, the GCS key-value store's default namespace).
V1_REQUEST_KEY = b"autoscaler_resource_request"


def report(state: Any, *, requested: tuple[ShapeCount, ...] = ()) -> RayReport:
    """From a `ClusterResourceState` of the cluster's Ray head; `requested`: the
    `request_resources()` constraint as autoscaler v1 keeps it (`v1_requested`), used when the
    state carries none."""
    demand = demand_of(state)
    if requested and not demand.requested:
        demand = replace(demand, requested=requested)
    version = int(getattr(state, "cluster_resource_state_version", 0))
    return RayReport(demand, tuple(live_nodes(state)), version)


def demand_of(state: Any) -> Demand:
    tasks = tuple(
        ShapeCount(
            _resources(r.request.resources_bundle),
            int(r.count),
            tuple(_selector(s) for s in r.request.label_selectors),
        )
        for r in state.pending_resource_requests
        if int(r.count) > 0
    )
    groups = tuple(_group(i, gang) for i, gang in enumerate(state.pending_gang_resource_requests))
    requested: tuple[ShapeCount, ...] = ()
    for constraint in state.cluster_resource_constraints:
        requested += tuple(
            ShapeCount(
                _resources(r.request.resources_bundle),
                int(r.count),
                tuple(_selector(s) for s in r.request.label_selectors),
            )
            for r in constraint.resource_requests
        )
    return Demand(
        tasks=tasks, placement_groups=tuple(g for g in groups if g.bundles), requested=requested
    )


def v1_requested(data: bytes | None) -> tuple[ShapeCount, ...]:
    """The `request_resources()` constraint as autoscaler v1 keeps it: a JSON list of bundles
    (`[{"CPU": 1}, {"CPU": 1}, {"GPU": 1}]`), equal ones counted together; nothing when absent
    or unreadable (`request_resources(num_cpus=0)` writes an empty list)."""
    try:
        bundles = json.loads(data) if data else []
    except ValueError:
        return ()
    shapes = [
        {
            str(k): float(v)
            for k, v in bundle.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0
        }
        for bundle in (bundles if isinstance(bundles, list) else [])
        if isinstance(bundle, dict)
    ]
    return request_resources(bundles=[s for s in shapes if s])


def live_nodes(state: Any) -> list[CurrentNode]:
    """Ray's live nodes of the cluster, the head among them (a dead or draining node is no
    capacity); a worker's node type is its `rv_node_type` label."""
    nodes: list[CurrentNode] = []
    for node in state.node_states:
        if int(node.status) in _GONE:
            continue
        labels = dict(node.labels)
        node_type = labels.get(NODE_TYPE_LABEL)
        nodes.append(
            CurrentNode(
                node_type=node_type or "head",
                running=True,
                total=_resources(node.total_resources),
                available=_resources(node.available_resources),
                labels=labels,
                head=node_type is None,
                node_id=bytes(node.node_id).hex(),
                idle_ms=int(node.idle_duration_ms),
            )
        )
    return nodes


def _resources(bundle: Mapping[str, float]) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(bundle).items() if float(v) > 0}


def _selector(proto: Any) -> LabelSelector:
    return tuple(
        LabelConstraint(
            str(c.label_key), tuple(str(v) for v in c.label_values), int(c.operator) == _NOT_IN
        )
        for c in proto.label_constraints
    )


def _group(index: int, gang: Any) -> PlacementGroup:
    """`details` reads "<pg id>:<STRATEGY>|<STATE>"; the bundles are those of the first (preferred)
    selector, or the gang's own requests."""
    details = str(gang.details)
    ident, _, rest = details.partition(":")
    strategy = rest.split("|", 1)[0]
    chosen: Strategy = next((s for s in _STRATEGIES if s == strategy), "PACK")
    requests = (
        gang.bundle_selectors[0].resource_requests if len(gang.bundle_selectors) else gang.requests
    )
    bundles = tuple(
        Bundle(_resources(r.resources_bundle), _first(r.label_selectors)) for r in requests
    )
    return PlacementGroup(ident or f"pg{index}", chosen, bundles)


def _first(selectors: Any) -> LabelSelector:
    return _selector(selectors[0]) if len(selectors) else ()
