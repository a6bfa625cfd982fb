"""Build the typed model from a schema-valid document with its defaults filled in.

The schema has already vouched for every type and every key, so this module only maps names; it
never decides a default (those live in the schema). The one thing it computes is each node
type's shape (`spec.shapes`), from fields the schema has already typed.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from reconciler.model.spec import (
    Blocklist,
    Breaker,
    Cadences,
    ClusterSpec,
    FilterValue,
    Head,
    NodeType,
    OfferQuery,
    Provider,
    SourceRef,
    Watchdogs,
)
from reconciler.spec import shapes


def cluster(doc: dict[str, Any], *, source: SourceRef, digest: str) -> ClusterSpec:
    spec = doc["spec"]
    return ClusterSpec(
        name=doc["metadata"]["name"],
        description=doc["metadata"]["description"],
        provider=Provider(**spec["provider"]),
        head=Head(**spec["head"]),
        max_dollars_per_hour=float(spec["max_dollars_per_hour"]),
        max_workers=spec.get("max_workers"),
        scheduling=spec.get("scheduling", "ray"),
        node_types=MappingProxyType(
            {
                name: node_type(name, body, cluster=doc["metadata"]["name"])
                for name, body in spec["node_types"].items()
            }
        ),
        watchdogs=Watchdogs(**spec["watchdogs"]),
        cadences=Cadences(**spec["cadences"]),
        breaker=Breaker(**spec["breaker"]),
        blocklist=Blocklist(**spec["blocklist_seconds"]),
        allow_short_thresholds=spec["testing"]["allow_short_thresholds"],
        source=source,
        digest=digest,
        document=json.dumps(doc, sort_keys=True, default=str),
    )


def node_type(name: str, body: dict[str, Any], *, cluster: str) -> NodeType:
    offer = offer_query(body["offer"])
    declared_resources = body.get("resources")
    declared_labels = body.get("labels")
    shape = shapes.derive(
        cluster=cluster,
        node_type=name,
        filters=offer.filters,
        ray_resources=body["ray_resources"],
        ray_labels=body["ray_labels"],
        declared_resources=declared_resources,
        declared_labels=declared_labels,
    )
    advertised = shapes.advertised_resources(body["ray_resources"], declared_resources)
    return NodeType(
        name=name,
        min_workers=body["min_workers"],
        max_workers=body["max_workers"],
        offer=offer,
        image=body["image"],
        disk_gb=float(body["disk_gb"]),
        candidate_factor=body["candidate_factor"],
        pull_limit_seconds=body["pull_limit_seconds"],
        agent=body["agent"],
        env=MappingProxyType(dict(body["env"])),
        ray_resources=MappingProxyType(advertised),
        ray_labels=MappingProxyType({**body["ray_labels"], **(declared_labels or {})}),
        shape=shape,
        declared_resources=MappingProxyType(
            {k: float(v) for k, v in (declared_resources or {}).items()}
        ),
        idle_stop_after_seconds=body.get("idle_stop_after_seconds"),
        idle_destroy_after_seconds=body.get("idle_destroy_after_seconds"),
    )


def offer_query(body: dict[str, Any]) -> OfferQuery:
    filters = {
        field: MappingProxyType({op: _frozen(value) for op, value in ops.items()})
        for field, ops in body["filters"].items()
    }
    return OfferQuery(
        filters=MappingProxyType(filters),
        type=body["type"],
        max_bid_dollars_per_hour=body["max_bid_dollars_per_hour"],
        min_reliability=float(body["min_reliability"]),
        limit=body["limit"],
    )


def _frozen(value: Any) -> FilterValue:
    if isinstance(value, list):
        return tuple(value)
    result: FilterValue = value
    return result
