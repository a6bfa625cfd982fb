"""What Ray's packing leaves unplaced, and the pending nodes it does not need.

Split from `planning/raypacking.py`: the reading of Ray's `SchedulingReply` after the decision.
Demand Ray could not place is infeasible when it fits no node type at all (by Ray's own rule
of placing a request on an empty node), and capped when a node type could take it but a bound
leaves no room. `ray` is `raypacking._Ray`, Ray's autoscaler types (no Ray is imported here).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.model.demand import Demand, Unmet, launches_of


def unneeded(ray: Any, reply: Any) -> Mapping[str, int]:
    """Per node type, the pending nodes Ray would end as "pending and not needed": no demand
    and no `request_resources()` bundle is placed on them, and `min_workers` does not keep
    them (Ray's own idle termination of pending nodes)."""
    idle = ray.im.TerminationRequest.Cause.IDLE
    pending = {ray.im.Instance.QUEUED, ray.im.Instance.ALLOCATED}
    return launches_of(
        (t.instance_type, 1)
        for t in reply.to_terminate
        if t.cause == idle and t.instance_status in pending
    )


def fits_a_node_type(ray: Any, req: Any, configs: Sequence[Any]) -> bool:
    """Whether one request fits an empty node of some node type, by Ray's own rule."""
    s = ray.scheduler
    for config in configs:
        node = s.SchedulingNode.from_node_config(
            copy.deepcopy(config),
            status=s.SchedulingNodeStatus.TO_LAUNCH,
            node_kind=ray.im.NodeKind.WORKER,
        )
        remaining, _ = node.try_schedule([req], s.ResourceRequestSource.PENDING_DEMAND)
        if not remaining:
            return True
    return False


def unmet(
    ray: Any, reply: Any, demand: Demand, configs: Sequence[Any]
) -> tuple[list[Unmet], list[Unmet]]:
    infeasible: list[Unmet] = []
    capped: list[Unmet] = []

    def sort(unmet: Unmet, fits: bool) -> None:
        (capped if fits else infeasible).append(unmet)

    left = Counter(
        r.SerializeToString(deterministic=True) for r in reply.infeasible_resource_requests
    )
    for shape in demand.tasks:
        req = ray.request(shape.resources, shape.label_selectors)
        key = req.SerializeToString(deterministic=True)
        count = min(left[key], shape.count)
        left[key] -= count
        if count:
            unmet = Unmet("tasks", (positive(shape.resources),), count)
            sort(unmet, fits_a_node_type(ray, req, configs))
    by_id = {pg.id: pg for pg in demand.placement_groups}
    for gang in reply.infeasible_gang_resource_requests:
        pg = by_id[gang.details.split(":", 1)[0]]
        combined = ray.ResourceRequestUtil.combine_requests_with_affinity(
            list(gang.bundle_selectors[0].resource_requests)
        )
        unmet = Unmet(
            "placement_group",
            tuple(positive(b.resources) for b in pg.bundles),
            placement_group=pg.id,
            strategy=pg.strategy,
        )
        sort(unmet, all(fits_a_node_type(ray, r, configs) for r in combined))
    if reply.infeasible_cluster_resource_constraints:
        for shape in demand.requested:
            req = ray.request(shape.resources, shape.label_selectors)
            unmet = Unmet("request_resources", (positive(shape.resources),), shape.count)
            sort(unmet, fits_a_node_type(ray, req, configs))
    return infeasible, capped


def positive(resources: Mapping[str, float]) -> dict[str, float]:
    """Ray reports and compares only positive amounts (a `GPU: 0` key would count as asking
    for GPUs in its GPU-conservation rule)."""
    return {k: float(v) for k, v in resources.items() if v > 0}
