"""The agenda: when each job of each cluster is due, when to wake, and when to list again.

Every cluster has a `Schedule` (one clock per watchdog, DESIGN.md 5). On top of the cadences, a
record's own deadlines bring work forward: a machine whose start deadline comes needs a listing
now, a net whose threshold a record reaches runs now (a limit fires within seconds of it, not at
the next cadence), and a cluster one of whose machines just ended is listed at the next tick (its
slot may need a replacement). A listing that failed is not asked for again within
`settings.LISTING_RETRY_SECONDS` (vast's outage must not turn the deadlines into a request loop).

`due` and `next_wakeup` share one reading of the deadlines per version of the records: `watch`
asks when each cluster next needs a listing, and when each machine net's threshold comes, twice a
tick (to decide what is due, then how long to sleep) and once more for each net it
schedules. The answers depend only on the records and the spec, which change far less often than
that (a 6-hour adversary seed made 9,208 readings of 1,541 ticks' records). The records are
immutable and the journal hands out the same object until a change is saved, so a reading is kept
for as long as both are the very same objects.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from reconciler import settings
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning import deadlines
from reconciler.watch.schedule import Schedule

# Jobs that run only with a complete listing: recorded as run only when the listing was had.
LISTING_JOBS = frozenset({"reconcile", "orphan_sweep"})


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

    def forget(self, name: str) -> None:
        """A cluster no longer declared: its reading (and the records it holds) goes."""
        self._kept.pop(name, None)


@dataclass
class Agenda:
    """What is due, per cluster, and when the next tick has work.

    `nets` names the machine nets whose thresholds bring their job forward (the controller's
    table; a benchmark may swap it)."""

    nets: Collection[str]
    schedules: dict[str, Schedule] = field(default_factory=dict)
    # When each cluster was last listed completely, and the clusters to list at the next tick.
    listed_at: dict[str, float] = field(default_factory=dict)
    wake: set[str] = field(default_factory=set)
    # When a cluster's listing last failed (an early listing waits a little after a failure).
    failed_at: dict[str, float] = field(default_factory=dict)
    pruned_at: float = float("-inf")
    # How often Ray's demand is read between reconciles (set when a Ray reader is attached);
    # None: only at the reconcile.
    demand_check_seconds: float | None = None
    demand_checked_at: float = float("-inf")
    _readings: DeadlineReadings = field(default_factory=DeadlineReadings)

    def follow(self, old: Mapping[str, ClusterSpec], new: Mapping[str, ClusterSpec]) -> None:
        """New specs: a new cluster gets a schedule, a changed one reconciles at the next tick
        (not at the next cadence); the other clocks keep running."""
        for name, spec in new.items():
            if name not in self.schedules:
                self.schedules[name] = Schedule.of(spec.cadences)
                continue
            self.schedules[name].retune(spec.cadences)
            if name not in old or old[name].digest != spec.digest:
                self.schedules[name].last.pop("reconcile", None)
        for gone in set(self.schedules) - set(new):
            del self.schedules[gone]
            self._readings.forget(gone)

    def due(self, name: str, now: float, records: Records, spec: ClusterSpec | None) -> list[str]:
        """`name`'s jobs due now: its cadences, its listing when a deadline asks for one, and the
        nets whose thresholds a record reached."""
        jobs = self.schedules[name].due(now)
        if spec is None:
            return jobs
        # The orphan sweep runs on a reconcile's listing: when it is due, so is the listing (a
        # sweep left waiting for the reconcile kept `next_wakeup` at 0: a tick every 50 ms).
        listing = self._listing_due(name, now, records, spec) or "orphan_sweep" in jobs
        if listing and "reconcile" not in jobs:
            jobs.append("reconcile")
        for job, at in self._net_deadlines(name, records, spec).items():
            if at <= now and job not in jobs:
                jobs.append(job)
        return jobs

    def wakeups(
        self, name: str, now: float, records: Records, spec: ClusterSpec | None
    ) -> list[float]:
        """Seconds until each thing `name` waits for: its next cadence, its next listing, the
        next threshold of a net."""
        waits = [self.schedules[name].next_due(now)]
        if spec is None:
            return waits
        at = deadlines.first_after(self._reading(name, records, spec).listing, self._listed(name))
        if name in self.wake:
            at = now
        if at is not None:
            waits.append(max(0.0, at - now, self._retry_at(name) - now))
        waits += [max(0.0, at - now) for at in self._net_deadlines(name, records, spec).values()]
        return waits

    def demand_wait(self, now: float) -> list[float]:
        if self.demand_check_seconds is None:
            return []
        return [max(0.0, self.demand_checked_at + self.demand_check_seconds - now)]

    def demand_check_due(self, now: float) -> bool:
        """Ray's demand is read between reconciles every few seconds (when a reader is there)."""
        every = self.demand_check_seconds
        if every is None or now - self.demand_checked_at < every:
            return False
        self.demand_checked_at = now
        return True

    def pruning_due(self, now: float) -> bool:
        return now - self.pruned_at >= settings.PRUNE_SECONDS

    def listed(self, names: Iterable[str], now: float) -> None:
        """A complete listing of `names` was had (and the records of undeclared clusters were
        pruned on it)."""
        for name in names:
            self.listed_at[name] = now
            self.wake.discard(name)
        self.pruned_at = now

    def listing_failed(self, names: Iterable[str], now: float) -> None:
        self.failed_at.update({name: now for name in names})

    def kept(self, names: Iterable[str]) -> dict[str, tuple[float | None, bool]]:
        """What a reconcile that raises must give back (its clusters' listing clocks)."""
        return {name: (self.listed_at.get(name), name in self.wake) for name in names}

    def restore(self, kept: Mapping[str, tuple[float | None, bool]]) -> None:
        """A reconcile that raised did not list its clusters: their deadlines stay to be met."""
        for name, (at, woken) in kept.items():
            if at is None:
                self.listed_at.pop(name, None)
            else:
                self.listed_at[name] = at
            if woken:
                self.wake.add(name)

    def missed(self, name: str, jobs: Iterable[str], now: float) -> None:
        """Listing jobs that were due and did not run: due again soon, not at once."""
        if name in self.schedules:
            self.schedules[name].retry(list(jobs), now, settings.LISTING_RETRY_SECONDS)

    def ran(self, name: str, jobs: list[str], now: float) -> None:
        if name in self.schedules:
            self.schedules[name].ran(jobs, now)

    def _listed(self, name: str) -> float:
        return self.listed_at.get(name, float("-inf"))

    def _retry_at(self, name: str) -> float:
        return self.failed_at.get(name, float("-inf")) + settings.LISTING_RETRY_SECONDS

    def _listing_due(self, name: str, now: float, records: Records, spec: ClusterSpec) -> bool:
        """A record's deadline has come (or a machine just ended): list now, not at the cadence
        (but not again within seconds of a listing that failed)."""
        if now < self._retry_at(name):
            return False
        if name in self.wake:
            return True
        at = deadlines.first_after(self._reading(name, records, spec).listing, self._listed(name))
        return at is not None and at <= now

    def _net_deadlines(self, name: str, records: Records, spec: ClusterSpec) -> dict[str, float]:
        """The machine nets' thresholds that a record of `name` reaches after the net last ran."""
        last = self.schedules[name].last
        found = self._reading(name, records, spec).nets
        return {
            job: at
            for job, at in found.items()
            if job in self.nets and at > last.get(job, float("-inf"))
        }

    def _reading(self, name: str, records: Records, spec: ClusterSpec) -> Reading:
        return self._readings.of(name, records, spec)
