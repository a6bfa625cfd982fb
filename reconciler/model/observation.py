"""What one reconcile saw: the listing, the offers searched, and what Ray reported, all read at
once.

`listing` is None when vast could not be listed completely: a failed, empty-by-error or partial
listing is "unknown", never "all gone" (DESIGN.md rule 5), and the planner refuses to plan on it.
`ray` is each read cluster's Ray report as read (its demand and live nodes); a cluster without
one asks for nothing beyond `min_workers`. How many workers a report needs is the planner's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.model.demand import RayReport
from reconciler.model.observed import Instance, Offer

NodeKey = tuple[str, str]  # (cluster, node type)


@dataclass(frozen=True)
class Observation:
    listing: tuple[Instance, ...] | None
    offers: Mapping[NodeKey, tuple[Offer, ...]] = field(default_factory=dict)
    ray: Mapping[str, RayReport] = field(default_factory=dict)
    listing_error: str | None = None
    search_errors: Mapping[NodeKey, str] = field(default_factory=dict)
    # Since when each cluster's Ray head could not be read (absent: read, or not read at all).
    ray_unread_since: Mapping[str, float] = field(default_factory=dict)

    def by_id(self) -> dict[int, Instance]:
        return {i.id: i for i in self.listing or ()}

    def by_label(self) -> dict[str, Instance]:
        return {i.label: i for i in self.listing or () if i.label}
