"""The offer search for one node type: the spec's query plus the filters ray-vast always adds."""

from __future__ import annotations

from reconciler.model.observed import Filter, OfferSearch
from reconciler.model.spec import NodeType
from reconciler.planning.offers import PORTS_PER_WORKER


def offer_search(node_type: NodeType) -> OfferSearch:
    query = node_type.offer
    ours = (
        Filter("verified", "eq", True),
        Filter("rentable", "eq", True),
        Filter("rented", "eq", False),
        Filter("reliability", "gte", query.min_reliability),
        Filter("direct_port_count", "gte", PORTS_PER_WORKER),
        Filter("disk_space", "gte", node_type.disk_gb),
    )
    theirs = tuple(
        Filter(field, op, value)  # type: ignore[arg-type]  # ops were checked by the schema
        for field, ops in query.filters.items()
        for op, value in ops.items()
    )
    return OfferSearch(
        filters=ours + theirs,
        type=query.type,
        limit=query.limit,
        allocated_storage=node_type.disk_gb,
    )
