"""Ray's report into the workers each node type needs: Ray's own packing, in the planner.

The observation carries what Ray's head reported (`model.demand.RayReport`: pending tasks and
actors by shape, pending placement groups, the `request_resources()` constraint, and Ray's live
nodes with their resources and labels; `watch/raydemand.py` reads it). Here the slots we are
still filling go in beside Ray's nodes (pending nodes, one per unit of capacity Ray does not show
yet, as Ray counts a launching node), a halted node type is capped at what it has (a permanent
failure launches nothing: its demand goes to the others), and `planning.raypacking` (Ray's own
`ResourceDemandScheduler`, within the cluster's `max_workers` as Ray's top-level one bounds it,
and within the $/h left as Ray bounds a node type) says how many nodes of each type to launch and
which pending ones no demand needs. The planner is told the workers each node type needs: the
capacity it counts (workers and open slots), less the pending nodes Ray finds not needed, plus
the launches. So 3 busy workers and 2 pending one-CPU tasks on 2-CPU nodes make 4, not 2; and a
request whose tasks went away is needed by nothing (the no-consumer watchdog ends it).

Demand that fits no node type is kept (`Reading.infeasible`, in Ray's words) for the controller
to say once per shape; it rents nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from reconciler.model.demand import Choice, CurrentNode, RayReport, Unmet, type_shapes
from reconciler.model.observation import NodeKey, Observation
from reconciler.model.observed import Offer
from reconciler.model.plan import Detection
from reconciler.model.recordindex import RecordIndex
from reconciler.model.records import BreakerState, Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning import raypacking, scaling
from reconciler.planning.draft import Draft
from reconciler.planning.offers import Budget, unfit_reason


@dataclass(frozen=True)
class Reading:
    """One cluster's demand as the planner takes it, and what could not be placed."""

    wanted: Mapping[NodeKey, int] = field(default_factory=dict)
    infeasible: tuple[str, ...] = ()  # "{GPU: 1} fits no node type of local-sim"
    unplaced: tuple[Unmet, ...] = ()  # the same demand, as the packing left it
    # `scheduling: cheapest`: per node type launched by price, why (its price and the others')
    chosen: Mapping[str, str] = field(default_factory=dict)


def reading(
    report: RayReport,
    spec: ClusterSpec,
    index: RecordIndex,
    breakers: Mapping[str, BreakerState],
    *,
    offers: Mapping[NodeKey, Sequence[Offer]] | None = None,
    allowance: float | None = None,
) -> Reading:
    """What Ray reported for one cluster packed onto the cluster's node types as Ray packs it;
    with `offers` and `allowance`, a node of each type priced at its cheapest acceptable offer
    and the launches kept within the $/h left."""
    have = {n: scaling.capacity(index, spec.name, n) for n in spec.node_types}
    nodes = with_pending(report.nodes, have)
    # a halted node type (a permanent failure) launches nothing: its demand goes to the others
    shapes = tuple(
        replace(t, max_workers=min(t.max_workers, _count(nodes, t.name)), min_workers=0)
        if scaling.halted(breakers, spec, spec.node_types[t.name])
        else t
        for t in type_shapes(spec)
    )
    offered = None if offers is None else cheapest_offers(spec, offers)
    packing = raypacking.pack(
        shapes,
        nodes,
        report.demand,
        max_workers=spec.max_workers,
        prices=None if offered is None else {n: offered.get(n, 0.0) for n in spec.node_types},
        allowance=allowance,
        cheapest=offered if spec.scheduling == "cheapest" else None,
    )
    wanted = {
        (spec.name, name): count
        - int(packing.unneeded.get(name, 0))
        + int(packing.launches.get(name, 0))
        for name, count in have.items()
    }
    infeasible = tuple(f"{u.words()} fits no node type of {spec.name}" for u in packing.infeasible)
    return Reading(wanted, infeasible, packing.infeasible, chosen_words(packing.choices))


def chosen_words(choices: Sequence[Choice]) -> dict[str, str]:
    """Per node type launched by price, why: the first pick's prices, and how many nodes."""
    out: dict[str, str] = {}
    for choice in choices:
        count = sum(1 for c in choices if c.node_type == choice.node_type)
        nodes = f"{count} node(s)" if count > 1 else "a node"
        out.setdefault(choice.node_type, f"scheduling cheapest launched {nodes}: {choice.words()}")
    return out


def readings(
    reports: Mapping[str, RayReport], specs: Mapping[str, ClusterSpec], records: Records
) -> dict[str, Reading]:
    """Each reported cluster's reading against the records, unpriced (no budget: what the
    between-reconcile wake-up and the nets compare with; the plan packs within the budget)."""
    return {
        name: reading(report, specs[name], records.index, records.breakers)
        for name, report in reports.items()
        if name in specs
    }


def wanted_of(found: Mapping[str, Reading]) -> dict[NodeKey, int]:
    """The workers wanted per node type, over every reading."""
    return {key: n for r in found.values() for key, n in r.wanted.items()}


def workers_wanted(
    draft: Draft, spec: ClusterSpec, observation: Observation, budget: Budget
) -> Reading:
    """The workers Ray's report needs per node type, packed as Ray packs it within the cluster's
    caps and the $/h left (a cluster Ray was not read for asks for nothing beyond min_workers),
    and, with `scheduling: cheapest`, why each node type launched by price was chosen."""
    report = observation.ray.get(spec.name)
    if report is None:
        return Reading()
    return reading(
        report,
        spec,
        draft.index,
        draft.breakers,
        offers=observation.offers,
        allowance=max(0.0, budget.cap - budget.spent),
    )


RAY_UNREADABLE_SECONDS = 60.0


def unreadable(draft: Draft, spec: ClusterSpec, observation: Observation) -> str | None:
    """Why nothing may be rented for a cluster whose Ray head has not been readable for 60 s
    (DESIGN.md 11: workers that cannot join it are money for nothing), alerting a person; None
    while it is read (or was unreadable for less)."""
    since = observation.ray_unread_since.get(spec.name)
    if since is None or draft.now - since < RAY_UNREADABLE_SECONDS:
        return None
    why = (
        f"the Ray head of {spec.name} at {spec.head.address}:{spec.head.ray_port} has not been "
        f"readable for {draft.now - since:.0f}s: nothing is rented until it answers"
    )
    found = Detection(spec.name, "ray_unreadable", why, cluster=spec.name)
    raised = len(draft.alerts)
    draft.alert(spec.name, found)
    if len(draft.alerts) > raised:  # the ledger says it when the alert is raised, not each plan
        draft.detections.append(found)
    return why


def cheapest_offers(
    spec: ClusterSpec, offers: Mapping[NodeKey, Sequence[Offer]]
) -> dict[str, float]:
    """A node of each type at its cheapest offer that meets the type's own filters (what the
    rental would pick first); a type with no such offer is left out (it rents nothing, so the
    budget counts it at nothing, and `scheduling: cheapest` puts it after every priced one)."""
    out: dict[str, float] = {}
    for name, node_type in spec.node_types.items():
        fit = [
            o.dph_total for o in offers.get((spec.name, name), ()) if not unfit_reason(o, node_type)
        ]
        if fit:
            out[name] = min(fit)
    return out


def with_pending(live: Sequence[CurrentNode], have: Mapping[str, int]) -> list[CurrentNode]:
    """Ray's live nodes of the cluster, and one pending node per unit of capacity we count that
    Ray does not show yet (an open slot, or a worker whose Ray has not joined)."""
    nodes = list(live)
    for name, count in have.items():
        shown = sum(1 for n in live if n.node_type == name and not n.head)
        nodes += [CurrentNode(node_type=name, running=False)] * max(0, count - shown)
    return nodes


def _count(nodes: list[CurrentNode], node_type: str) -> int:
    return sum(1 for n in nodes if n.node_type == node_type and not n.head)
