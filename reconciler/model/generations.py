"""Each cluster's generation: a digest of what a plan of it was made from (DESIGN.md 11).

A saved plan is stale only when a cluster it covers changed since it was made: its instances,
requests, blocklist, breakers or cluster record, read without the fields that are the world's
telemetry rather than decisions (a heartbeat's time, a listing's sighting, an idle sample; a
pool's idle-since, which the nets read and no plan acts on). So a `watch` answering heartbeats
for hours, or a change to another cluster, never stales a reviewed plan; a rental, a destroy, a
pin, a breaker's trip does. The global serial stays what
every write's compare-and-swap checks: generations are for plans, not for writes (Atlantis scopes
its locks per project the same way).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.model.codec import encode
from reconciler.model.records import Records

# What heartbeats, listings and Ray's samples refresh on every sighting: not a decision.
TELEMETRY = frozenset(
    {
        "provider_seen_at",
        "provider_ok_at",
        "probe_ok_at",
        "self_report_at",
        "sample_at",
        "sample_busy",
        "listed_ip",
    }
)


def generation(records: Records, cluster: str) -> str:
    """The digest of `cluster`'s part of the records, telemetry left out."""
    instances = {
        rid: {k: v for k, v in encode(r).items() if k not in TELEMETRY}
        for rid, r in records.instances.items()
        if r.cluster == cluster
    }
    part: dict[str, Any] = {
        "instances": instances,
        "requests": {i: encode(r) for i, r in records.requests.items() if r.cluster == cluster},
        "blocklist": encode(records.blocklist.get(cluster, {})),
        "breakers": {k: encode(b) for k, b in records.breakers.items() if _of(k, cluster)},
        "cluster": encode(records.clusters.get(cluster)),
    }
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def generations(records: Records, clusters: Iterable[str]) -> dict[str, str]:
    return {name: generation(records, name) for name in sorted(set(clusters))}


def moved(before: Mapping[str, str], records: Records) -> list[str]:
    """The clusters whose generation is not what `before` says any more."""
    return [name for name, was in sorted(before.items()) if generation(records, name) != was]


def _of(key: str, cluster: str) -> bool:
    """Breaker keys are `cluster/node_type` (or the cluster alone)."""
    return key == cluster or key.startswith(cluster + "/")
