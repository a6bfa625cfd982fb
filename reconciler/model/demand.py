"""Ray's demand, and the cluster as Ray's autoscaler sees it: what `planning.raypacking` takes and
gives (DESIGN.md 10, "Ray demand is Ray's").

Plain data with Ray's names and Ray's rules of thumb, so the planner, the views and the tests can
build and read it without importing Ray:

- a node type is a shape (resources, labels) with `min_workers` and `max_workers`;
- a current node is running (Ray has it, with total and available resources) or pending (rented
  or renting, not yet in Ray: Ray's autoscaler counts such a node at its node type's shape);
- demand is what Ray's GCS reports: pending tasks and actors by shape and count, pending
  placement groups (strategy and the bundles not yet placed), and the one `request_resources()`
  constraint (bundles the cluster should be able to hold at once, idle or not);
- the answer is the nodes to launch per node type, and the shapes that could not be placed:
  those that fit no node type at all, and those a node type would fit but its bounds leave out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from reconciler.model.accelerators import ACCELERATOR_RESOURCE_PREFIX
from reconciler.model.spec import ClusterSpec, NodeType

# The label the head gives every worker of a node type (spec/shapes.py derives it into the shape).
NODE_TYPE_LABEL = "rv_node_type"
# ... and the one that ties a worker's Ray node to its record.
RECORD_LABEL = "rv_record"

Resources = Mapping[str, float]
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[Strategy, ...] = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class LabelConstraint:
    """One condition of a Ray label selector: the node's label `key` is one of `values`
    (`in`), or is not (`!in`; a node without the label passes), as Ray's scheduler reads it."""

    key: str
    values: tuple[str, ...]
    negated: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        found = labels.get(self.key)
        return (found not in self.values) if self.negated else (found in self.values)


# All constraints of a selector must hold (Ray's `LabelSelector`).
LabelSelector = tuple[LabelConstraint, ...]


def label_selector(selector: Mapping[str, str]) -> LabelSelector:
    """A selector from Ray's own syntax, `label_selector={"key": "value"}`, where a value is
    `v`, `!v`, `in(a,b)` or `!in(a,b)`."""
    constraints = []
    for key, text in selector.items():
        negated = text.startswith("!")
        body = text[1:] if negated else text
        if body.startswith("in(") and body.endswith(")"):
            values = tuple(v.strip() for v in body[3:-1].split(",") if v.strip())
        else:
            values = (body,)
        constraints.append(LabelConstraint(key, values, negated))
    return tuple(constraints)


@dataclass(frozen=True)
class TypeShape:
    """A node type as the packing sees it: the least a worker has, and the bounds."""

    name: str
    resources: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    min_workers: int = 0
    max_workers: int = 1

    @classmethod
    def of(cls, node_type: NodeType) -> TypeShape:
        return cls(
            name=node_type.name,
            resources=node_type.shape.resources,
            labels=node_type.shape.labels,
            min_workers=node_type.min_workers,
            max_workers=node_type.max_workers,
        )


def type_shapes(cluster: ClusterSpec) -> tuple[TypeShape, ...]:
    """Every node type of a cluster, in the order the spec declares them (Ray breaks ties
    between equally good node types by that order)."""
    return tuple(TypeShape.of(t) for t in cluster.node_types.values())


@dataclass(frozen=True)
class CurrentNode:
    """A node of the cluster now.

    Running: Ray has it; `total` and `available` are what Ray reports (`available` defaults to
    `total`), `labels` its labels. Pending: rented or renting but not in Ray yet; one per slot
    that will become a worker (not per candidate). Ray's autoscaler counts a pending node at its
    node type's shape; give `total` when the shape of this one is known (its offer's, or its
    agent's once it enrolled), and it is counted at that instead.

    `head` marks Ray's head (its node type need not be a worker node type; it is never
    launched). `idle_ms` is how long Ray has seen the node idle.
    """

    node_type: str
    running: bool
    total: Resources | None = None
    available: Resources | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    head: bool = False
    node_id: str = ""
    idle_ms: int = 0

    def __post_init__(self) -> None:
        if self.running and self.total is None:
            raise ValueError("a running node has the total resources Ray reports")
        if self.head and not self.running:
            raise ValueError("Ray's head is a running node")


@dataclass(frozen=True)
class ShapeCount:
    """`count` requests of one shape: pending tasks or actors, or bundles of a
    `request_resources()` constraint. A request may carry label selectors: Ray places it where
    one of them holds, preferring the first (`fallback_strategy` adds the others)."""

    resources: Resources
    count: int = 1
    label_selectors: tuple[LabelSelector, ...] = ()


@dataclass(frozen=True)
class Bundle:
    """One bundle of a placement group, with its own label selector if it has one."""

    resources: Resources
    label_selector: LabelSelector = ()


@dataclass(frozen=True)
class PlacementGroup:
    """A pending placement group: its bundles not yet placed, placed all at once or not at all.
    STRICT_PACK puts them on one node, STRICT_SPREAD each on its own node; PACK and SPREAD are
    preferences the autoscaler does not enforce (Ray's GCS gives it no constraint for them)."""

    id: str
    strategy: Strategy
    bundles: tuple[Bundle, ...]

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown placement strategy {self.strategy!r}")


@dataclass(frozen=True)
class Demand:
    """What Ray asks for, as its GCS reports it to the autoscaler."""

    tasks: tuple[ShapeCount, ...] = ()
    placement_groups: tuple[PlacementGroup, ...] = ()
    requested: tuple[ShapeCount, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.tasks or self.placement_groups or self.requested)


@dataclass(frozen=True)
class RayReport:
    """What one cluster's Ray head reported, as its autoscaler reads it: the demand, and Ray's
    live nodes (the head among them) with their resources and labels. The observation carries
    it as read; how many workers it needs is the planner's (`planning/raydemand.py`)."""

    demand: Demand = field(default_factory=Demand)
    nodes: tuple[CurrentNode, ...] = ()
    # The GCS's cluster resource state version the report was read at (what an autoscaler
    # says it last saw when it reports back).
    version: int = 0


def asking_for(
    cluster: ClusterSpec, workers: Mapping[str, int], *, by_shape: bool = False
) -> RayReport:
    """A report of Ray asking for `workers[name]` workers of each node type and no live node:
    what a scenario or a benchmark scripts as demand. Packed, it needs exactly that many
    workers of each type (within the type's bounds): that many pending tasks of the node type's
    whole shape, each held to its node type by its `rv_node_type` label. A shape with no
    resources holds any number of tasks on one node, so its workers are asked for as Ray asks
    for nodes of their own: a STRICT_SPREAD placement group, one bundle per worker (at most the
    type's `max_workers`, since a group is placed whole or not at all).

    `by_shape`: the tasks ask for the shape only, as a Ray task asks for resources (no node-type
    label), so any node type they fit may take them: what a simulation of `scheduling` compares
    (Ray's score against the cheapest)."""
    tasks: list[ShapeCount] = []
    groups: list[PlacementGroup] = []
    for name, count in workers.items():
        node_type = cluster.node_types.get(name)
        if node_type is None or count <= 0:
            continue
        held = (LabelConstraint(NODE_TYPE_LABEL, (name,)),)
        resources = node_type.shape.resources
        if by_shape:
            resources = as_asked(resources)
        if resources:
            tasks.append(ShapeCount(resources, count, () if by_shape else (held,)))
        else:
            bundles = (Bundle({}, held),) * min(count, node_type.max_workers)
            groups.append(PlacementGroup(f"{name}-workers", "STRICT_SPREAD", bundles))
    return RayReport(Demand(tasks=tuple(tasks), placement_groups=tuple(groups)))


def as_asked(resources: Resources) -> Resources:
    """A node type's shape as a Ray task asks for it: its amounts, without the
    `accelerator_type:<name>` resource Ray gives a node of that GPU (a task asks for it only
    when it names a GPU model, and then fits that model's node type alone)."""
    return MappingProxyType(
        {k: v for k, v in resources.items() if not k.startswith(ACCELERATOR_RESOURCE_PREFIX)}
    )


def scripted(
    specs: Mapping[str, ClusterSpec],
    workers: Mapping[tuple[str, str], int],
    *,
    by_shape: bool = False,
) -> dict[str, RayReport]:
    """Reports of Ray asking for `workers[(cluster, node type)]` workers (`asking_for`), one per
    cluster of `specs`: what a scenario or a benchmark scripts as Ray's demand."""
    return {
        name: asking_for(
            spec, {t: n for (c, t), n in workers.items() if c == name}, by_shape=by_shape
        )
        for name, spec in specs.items()
    }


def request_resources(
    num_cpus: int | None = None,
    bundles: Sequence[Resources] = (),
    bundle_label_selectors: Sequence[Mapping[str, str]] = (),
) -> tuple[ShapeCount, ...]:
    """The constraint `ray.autoscaler.sdk.request_resources(...)` records: `num_cpus` bundles of
    one CPU, then the bundles, equal ones counted together (as Ray's SDK groups them)."""
    selectors = list(bundle_label_selectors) + [{}] * (len(bundles) - len(bundle_label_selectors))
    wanted: list[tuple[Resources, LabelSelector]] = [({"CPU": 1.0}, ())] * (num_cpus or 0)
    wanted += [(b, label_selector(s)) for b, s in zip(bundles, selectors, strict=False)]
    counts: dict[tuple[tuple[tuple[str, float], ...], LabelSelector], int] = {}
    for resources, selector in wanted:
        key = (tuple(sorted((k, float(v)) for k, v in resources.items())), selector)
        counts[key] = counts.get(key, 0) + 1
    return tuple(
        ShapeCount(MappingProxyType(dict(shape)), count, (selector,) if selector else ())
        for (shape, selector), count in counts.items()
    )


UnmetKind = Literal["tasks", "placement_group", "request_resources"]


@dataclass(frozen=True)
class Unmet:
    """Demand the packing could not place: `count` requests of one shape (tasks, or bundles of
    the request_resources constraint), or one placement group."""

    kind: UnmetKind
    bundles: tuple[Resources, ...]
    count: int = 1
    placement_group: str | None = None
    strategy: Strategy | None = None

    def words(self) -> str:
        """Ray's way of writing it: `{GPU: 1}`, `{CPU: 1} x 3`, or a placement group."""
        if self.kind == "placement_group":
            shapes = ", ".join(shape_words(b) for b in self.bundles)
            return f"placement group {self.placement_group} ({self.strategy}: {shapes})"
        text = shape_words(self.bundles[0]) if self.bundles else "{}"
        return text if self.count == 1 else f"{text} x {self.count}"


def shape_words(resources: Resources) -> str:
    """`{CPU: 1, GPU: 1}`: a shape with whole amounts written whole, names sorted."""
    parts = []
    for name in sorted(resources):
        amount = float(resources[name])
        parts.append(f"{name}: {int(amount) if amount.is_integer() else amount}")
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class Choice:
    """A new node `scheduling: cheapest` picked by price (planning/cheapest.py): its node type,
    the $/h of its cheapest acceptable offer per request it serves, the other node types that
    could have taken the same demand at theirs (None: no acceptable offer), and the node type
    Ray's own score would have launched."""

    node_type: str
    per_request: float
    dollars_per_hour: float
    served: int
    others: tuple[tuple[str, float | None], ...]
    ray_choice: str

    def words(self) -> str:
        """Why, in prices: "$0.5000/h per request (4 on a $2.0000/h node) against one $0.7000/h
        (Ray's score: one)"."""
        against = ", ".join(
            f"{name} {'no offer' if p is None else f'${p:.4f}/h'}" for name, p in self.others
        )
        node = f"{self.served} on a ${self.dollars_per_hour:.4f}/h node"
        why = f"${self.per_request:.4f}/h per request ({node})"
        if against:
            why += f" against {against}"
        return f"{why} (Ray's score: {self.ray_choice})"


@dataclass(frozen=True)
class Packing:
    """Ray's decision: nodes to launch per node type (those `min_workers` needs included, as Ray
    launches them), and what it leaves unplaced. `infeasible` fits no node type at all (rent
    nothing for it and say so); `capped` would fit a node type whose `max_workers`, or the
    cluster's node limit or its budget, leaves no room. `ray_version` is the Ray that
    decided."""

    launches: Mapping[str, int]
    infeasible: tuple[Unmet, ...]
    capped: tuple[Unmet, ...]
    ray_version: str
    # Pending nodes per node type that no demand needs (Ray would end them as "pending and not
    # needed"; `min_workers` keeps what it needs).
    unneeded: Mapping[str, int] = field(default_factory=dict)
    # With `scheduling: cheapest`, each new node picked by price, in Ray's order.
    choices: tuple[Choice, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.launches.values())


def launches_of(pairs: Iterable[tuple[str, int]]) -> Mapping[str, int]:
    """Counts by node type, without zeros, read-only."""
    out: dict[str, int] = {}
    for name, count in pairs:
        if count:
            out[name] = out.get(name, 0) + count
    return MappingProxyType(out)
