"""What the loop reads from Ray between its two phases: demand, unreadable heads, pins.

Ray's demand is read for every reconcile, and cheaply (Ray's GCS only, no call to vast) every few
seconds between them when a Ray reader is attached: a node type that needs more workers than are
there or coming wakes its cluster at once, not at the next reconcile (Ray's own autoscaler loop
runs every 5 s). Demand that fits no node type rents nothing and is said once per shape while Ray
keeps asking for it. A Ray head that cannot be read is remembered from when (DESIGN.md 11: after
60 s nothing is rented for it, and a person is alerted). Pins are reaper gate 3: a machine is
pinned while Ray reports work on its node; when Ray cannot be read the last known pins stay
(unknown is never "no work"). Every read goes through containment: a read that raises is
"unknown" for the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler.applying.journal import Journal
from reconciler.model.autoscaling import autoscaler_state
from reconciler.model.demand import RECORD_LABEL, RayReport
from reconciler.model.evolve import evolve
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning import alerts, raydemand, scaling
from reconciler.watch.agenda import Agenda
from reconciler.watch.alerting import raise_alert
from reconciler.watch.containment import Containment
from reconciler.watch.signals import Signals

log = logging.getLogger("ray_vast")
T = TypeVar("T")


@dataclass
class RaySide:
    journal: Journal
    containment: Containment
    agenda: Agenda
    say: Callable[[str], None]
    signals: Callable[[], Signals]  # the controller's, looked up at each read (tests swap it)
    _infeasible_said: set[tuple[str, str]] = field(default_factory=set)
    _unread_since: dict[str, float] = field(default_factory=dict)

    def _shared(self, part: str, step: Callable[[], T], unknown: T, specs: Collection[str]) -> T:
        return self.containment.shared(part, step, unknown, specs)

    def reports(
        self, specs: Mapping[str, ClusterSpec], now: float
    ) -> Mapping[str, RayReport] | None:
        """What every cluster's Ray head reported (None: unread); the demand in it that fits no
        node type is said, and each head is told what ray-vast is renting for it."""
        read = self._read(specs, now)
        return None if read is None else read[0]

    def _read(
        self, specs: Mapping[str, ClusterSpec], now: float
    ) -> tuple[Mapping[str, RayReport], dict[str, raydemand.Reading], Records] | None:
        """The reports, each packed once (unpriced) against the records they were read with."""
        reports = self._shared("ray_demand", lambda: self.signals().reports(specs), None, specs)
        if reports is None:
            return None
        seen = self.journal.records()
        found = raydemand.readings(reports, specs, seen)
        self._say_infeasible(specs, found, now)
        self._tell(reports, found, seen, now, specs)
        return reports, found, seen

    def _tell(
        self,
        reports: Mapping[str, RayReport],
        found: Mapping[str, raydemand.Reading],
        seen: Records,
        now: float,
        specs: Collection[str],
    ) -> None:
        """Tell each read cluster's Ray what ray-vast is renting for it (`ray status`)."""
        states = {
            name: autoscaler_state(
                name, seen, reading.unplaced, now, in_ray=_in_ray(reports.get(name))
            )
            for name, reading in found.items()
        }
        self._shared("ray_tell", lambda: self.signals().tell(states, now), None, specs)

    def check(self, specs: Mapping[str, ClusterSpec], now: float) -> None:
        """Between reconciles: wake the clusters whose node types Ray wants more of."""
        if not self.agenda.demand_check_due(now):
            return
        read = self._read(specs, now)
        if read is None:
            return
        _, found, seen = read
        for (cluster, node_type), count in raydemand.wanted_of(found).items():
            if cluster in specs and cluster not in self.agenda.wake:
                have = scaling.short_of(seen, specs[cluster], node_type, count)
                if have is not None:
                    log.info(
                        "%s/%s: Ray wants %d, %d there or coming", cluster, node_type, count, have
                    )
                    self.agenda.wake.add(cluster)

    def unread_since(self, specs: Collection[str], now: float) -> dict[str, float]:
        """Since when each cluster's Ray head has not been readable, as of the last reading."""
        nobody: Collection[str] = ()
        unread = set(self._shared("ray_unread", self.signals().unread, nobody, specs))
        for cluster in list(self._unread_since):
            if cluster not in unread:
                del self._unread_since[cluster]
        for cluster in unread:
            self._unread_since.setdefault(cluster, now)
        return dict(self._unread_since)

    def pins(self, specs: Collection[str]) -> None:
        """Pin the machines Ray reports work on (and unpin the others it speaks for)."""

        def update() -> None:
            work = self.signals().work(self.journal.records())
            if work is not None:
                self.journal.update(lambda records: _pinned(records, work))

        self._shared("ray_work", update, None, specs)

    def _say_infeasible(
        self, specs: Collection[str], found: Mapping[str, raydemand.Reading], now: float
    ) -> None:
        current = {(cluster, words) for cluster, r in found.items() for words in r.infeasible}
        for cluster, words in sorted(current - self._infeasible_said):
            if cluster in specs:
                concern = alerts.Concern(cluster, "infeasible_demand", words, by_message=True)
                raise_alert(self.journal, self.say, concern, now)
        self._infeasible_said = current


def _in_ray(report: RayReport | None) -> set[str]:
    """The records whose Ray node the report shows (the `rv_record` label the head gave it)."""
    nodes = report.nodes if report is not None else ()
    return {n.labels[RECORD_LABEL] for n in nodes if RECORD_LABEL in n.labels}


def _pinned(records: Records, work: Mapping[str, bool]) -> Records:
    """Only the records Ray spoke for (a reader serves its own cluster's head)."""
    changed = {
        r.id: evolve(r, pinned=work[r.id])
        for r in records.instances.values()
        if r.live and r.id in work and r.pinned != work[r.id]
    }
    if not changed:
        return records
    return evolve(records, instances={**records.instances, **changed})
