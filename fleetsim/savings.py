"""What `scheduling: cheapest` would have saved, on the user's own specs and failure mix.

Ray's autoscaler picks a node type by its utilisation score; `scheduling: cheapest` picks, among
the node types that fit, the one whose cheapest acceptable offer costs least per request served
(planning/cheapest.py). The choice only matters where a node type's demand fits another node
type too, so the comparison runs only on the clusters where some node type's shape fits
inside another's (`overlapping`), and asks for the demand as Ray's tasks ask for it: by shape
(GPUs and CPUs, not the GPU model's `accelerator_type`), with no node-type label
(`Config.by_shape`), so that either policy may place it anywhere it fits. Both runs are the
same scenario (seed, mix, demand curves, the fate of the k-th rental), one with every compared
cluster at `scheduling: ray` and one at `cheapest`; the dollars are what `ray-vast cost` says
of each run, and the work delivered is shown beside them, so that cheaper cannot mean doing
less unseen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from fleetsim.scenario import Config
from fleetsim.simulate import Result, simulate
from reconciler.model.demand import as_asked
from reconciler.model.spec import ClusterSpec, NodeType, Scheduling


@dataclass(frozen=True)
class Savings:
    """The compared clusters' dollars and work under each scheduling."""

    clusters: tuple[str, ...]
    ray_dollars: float
    cheapest_dollars: float
    ray_worked_hours: float
    cheapest_worked_hours: float
    ray_rentals: int
    cheapest_rentals: int

    @property
    def saved(self) -> float:
        """What `cheapest` saves against `ray` (negative: it costs more)."""
        return self.ray_dollars - self.cheapest_dollars

    @property
    def saved_share(self) -> float:
        return self.saved / self.ray_dollars if self.ray_dollars > 0 else 0.0


def overlapping(specs: Sequence[ClusterSpec]) -> tuple[ClusterSpec, ...]:
    """The clusters in which some node type's shape fits inside another node type's: there, a
    pending task may go to either, and Ray's score and the price can disagree."""
    return tuple(s for s in specs if _overlap(tuple(s.node_types.values())))


def _overlap(node_types: Sequence[NodeType]) -> bool:
    return any(_fits(a, b) for a in node_types for b in node_types if a is not b)


def _fits(small: NodeType, big: NodeType) -> bool:
    """Whether a task asking for `small`'s shape (as Ray's tasks ask: `as_asked`) fits `big`."""
    asked = as_asked(small.shape.resources)
    have = big.shape.resources
    return bool(asked) and all(v <= have.get(k, 0.0) for k, v in asked.items() if v > 0)


def compare(specs: Sequence[ClusterSpec], config: Config) -> Savings | None:
    """Both schedulings on the overlapping clusters (None: no cluster has a choice to make)."""
    compared = overlapping(specs)
    if not compared:
        return None
    by_shape = dataclasses.replace(config, by_shape=True)
    ray = _run(compared, by_shape, "ray")
    cheap = _run(compared, by_shape, "cheapest")
    return Savings(
        clusters=tuple(s.name for s in compared),
        ray_dollars=ray.dollars,
        cheapest_dollars=cheap.dollars,
        ray_worked_hours=ray.worked_hours,
        cheapest_worked_hours=cheap.worked_hours,
        ray_rentals=ray.rentals,
        cheapest_rentals=cheap.rentals,
    )


def _run(specs: Sequence[ClusterSpec], config: Config, scheduling: Scheduling) -> Result:
    return simulate([dataclasses.replace(s, scheduling=scheduling) for s in specs], config)
