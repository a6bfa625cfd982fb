"""The vast endpoints the client calls, and how often vast lets us call each.

An `Operation` is what the client does (`"stop"`); its `route` is the endpoint vast rate-limits it
under (stop, start and label are all `PUT /api/v0/instances/{id}/`, so they share one budget).
Counters are kept per operation, pacing per route.

The default minimum intervals are vast's documented `x-rate-limit` thresholds (openapi yaml, in
seconds between calls per identity), see `reference/vast-api.md` section 8. Search is "10 requests
per minute per IP", i.e. one every 6 s. The bulk destroy has no documented threshold; it gets the
single destroy's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Operation:
    name: str
    method: str
    path: str  # may hold `{id}`
    route: str

    def path_for(self, instance_id: int | None = None) -> str:
        if "{id}" not in self.path:
            return self.path
        if instance_id is None:
            raise ValueError(f"{self.name} needs an id")
        return self.path.format(id=int(instance_id))


SEARCH = Operation("search", "POST", "/api/v0/bundles/", route="bundles")
CREATE = Operation("create", "PUT", "/api/v0/asks/{id}/", route="asks")
LIST = Operation("list", "GET", "/api/v1/instances/", route="instances.list")
SHOW = Operation("show", "GET", "/api/v0/instances/{id}/", route="instances.show")
DESTROY = Operation("destroy", "DELETE", "/api/v0/instances/{id}/", route="instances.destroy")
BULK_DESTROY = Operation("bulk_destroy", "DELETE", "/api/v0/instances/", route="instances.bulk")
STOP = Operation("stop", "PUT", "/api/v0/instances/{id}/", route="instances.update")
START = Operation("start", "PUT", "/api/v0/instances/{id}/", route="instances.update")
LABEL = Operation("label", "PUT", "/api/v0/instances/{id}/", route="instances.update")
REBOOT = Operation("reboot", "PUT", "/api/v0/instances/reboot/{id}/", route="instances.reboot")

# vast's documented minimum intervals between two calls of a route by one identity.
VAST_THRESHOLDS: Mapping[str, float] = {
    "bundles": 6.0,
    "asks": 4.5,
    "instances.list": 1.0,
    "instances.show": 2.0,
    "instances.destroy": 3.0,
    "instances.bulk": 3.0,
    "instances.update": 1.0,
    "instances.reboot": 1.0,
}
# vast measures between arrivals: a call sent exactly one threshold after the last can arrive a
# little sooner and get a 429 (bench/head_latency.py saw 3 in 100 creates), so the client paces a
# little wider than the thresholds.
ARRIVAL_MARGIN_SECONDS = 0.1
DEFAULT_MIN_INTERVALS: Mapping[str, float] = {
    route: seconds + ARRIVAL_MARGIN_SECONDS for route, seconds in VAST_THRESHOLDS.items()
}
