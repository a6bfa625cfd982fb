"""Ray's demand into the workers each node type needs: Ray's own packing, in the planner.

The watch layer reads what Ray's autoscaler reads (`watch/raydemand.py`: pending tasks and
actors by shape, pending placement groups, the `request_resources()` constraint, and Ray's live
nodes with their resources and labels) into the pure `model.demand` types. Here the slots we are
still filling go in beside Ray's nodes (pending nodes, one per unit of capacity Ray does not show
yet, as Ray counts a launching node), a halted node type is capped at what it has (a permanent
failure launches nothing: its demand goes to the others), and `planning.raypacking` (Ray's own
`ResourceDemandScheduler`, within the cluster's `max_workers` as Ray's top-level one bounds it)
says how many nodes of each type to launch. The planner is told the
workers each node type needs in all: the capacity it already counts (workers and open slots) plus
those launches, so 3 busy workers and 2 pending one-CPU tasks on 2-CPU nodes make 4, not 2.

Demand that fits no node type is kept (`Reading.infeasible`, in Ray's words) for the controller
to say once per shape; it rents nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.model.demand import CurrentNode, Demand, type_shapes
from reconciler.model.observation import NodeKey
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning import raypacking, scaling


@dataclass(frozen=True)
class Reading:
    """One cluster's demand as the planner takes it, and what could not be placed."""

    wanted: Mapping[NodeKey, int] = field(default_factory=dict)
    infeasible: tuple[str, ...] = ()  # "{GPU: 1} fits no node type of local-sim"


def reading(
    demand: Demand, live: Sequence[CurrentNode], spec: ClusterSpec, records: Records
) -> Reading:
    """What Ray reported for one cluster (its demand and its live nodes) packed onto the
    cluster's node types as Ray packs it."""
    nodes = with_pending(live, spec, records)
    # a halted node type (a permanent failure) launches nothing: its demand goes to the others
    shapes = tuple(
        replace(t, max_workers=min(t.max_workers, _count(nodes, t.name)), min_workers=0)
        if scaling.halted(records, spec, spec.node_types[t.name])
        else t
        for t in type_shapes(spec)
    )
    packing = raypacking.pack(shapes, nodes, demand, max_workers=spec.max_workers)
    wanted: dict[NodeKey, int] = {}
    for name in spec.node_types:
        have = scaling.capacity(records.instances, records.requests, spec.name, name)
        wanted[(spec.name, name)] = have + int(packing.launches.get(name, 0))
    infeasible = tuple(f"{u.words()} fits no node type of {spec.name}" for u in packing.infeasible)
    return Reading(wanted, infeasible)


def with_pending(
    live: Sequence[CurrentNode], spec: ClusterSpec, records: Records
) -> list[CurrentNode]:
    """Ray's live nodes of the cluster, and one pending node per unit of capacity we count that
    Ray does not show yet (an open slot, or a worker whose Ray has not joined)."""
    nodes = list(live)
    for name in spec.node_types:
        have = scaling.capacity(records.instances, records.requests, spec.name, name)
        shown = sum(1 for n in live if n.node_type == name and not n.head)
        nodes += [CurrentNode(node_type=name, running=False)] * max(0, have - shown)
    return nodes


def _count(nodes: list[CurrentNode], node_type: str) -> int:
    return sum(1 for n in nodes if n.node_type == node_type and not n.head)
