"""One reading of a cluster's deadlines per version of its records.

`watch` asks when each cluster next needs a listing, and when each machine net's threshold
comes, twice a tick (to decide what is due, then how long to sleep) and once more for each net it
schedules. The answers depend only on the records and the spec, which change far less often than
that (a 6-hour adversary seed made 9,208 readings of 1,541 ticks' records). The records are
immutable and the journal hands out the same object until a change is saved, so a reading is kept
for as long as both are the very same objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning import deadlines


@dataclass(frozen=True)
class Reading:
    """A cluster's deadlines as one version of the records holds them."""

    listing: tuple[float, ...]  # every deadline a listing checks (`deadlines.listing_deadlines`)
    nets: Mapping[str, float]  # per machine net, its earliest threshold (`deadlines.net_deadlines`)


@dataclass
class DeadlineReadings:
    """The latest reading per cluster, with the records and spec it was read from (held, so
    their identities cannot be reused by other objects while the reading is kept)."""

    _kept: dict[str, tuple[Records, ClusterSpec, Reading]] = field(default_factory=dict)

    def of(self, name: str, records: Records, spec: ClusterSpec) -> Reading:
        kept = self._kept.get(name)
        if kept is not None and kept[0] is records and kept[1] is spec:
            return kept[2]
        instances = records.instances.values()
        reading = Reading(
            listing=deadlines.listing_deadlines(instances, records.requests.values(), spec),
            nets=deadlines.net_deadlines(instances, spec),
        )
        self._kept[name] = (records, spec, reading)
        return reading
