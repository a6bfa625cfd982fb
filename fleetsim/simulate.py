"""A what-if on virtual time: your cluster specs, thresholds and budget against a failure mix.

`simulate(specs, config)` runs the whole engine as `ray-vast watch` runs it (`fleetsim.harness`:
the controller with its planner, nets, money chain, executor and ledger; one head per cluster;
the agent's state machine in every container; vastsim on a virtual clock), with Ray's demand a
seeded step curve per node type and the fates of `fleetsim.mix` played into every rental at the
boundary. Then it accounts:

- dollars by cause, from the records and the ledger (`reconciler.model.cost`, what `ray-vast
  cost` reports), beside vastsim's meter (the truth it must match);
- per failure class, the dollars billed after each failure began, against the floor: what it
  would have cost had every failure been caught at the earliest moment the *default* windows
  allow (so that thresholds of your own show as a ratio above or below it); and the detection
  latency;
- false destroys (a machine stopped or ended while nothing was wrong with it: booting, or in its
  job), leaks (a failed or idle machine still billing in full at the end), the work delivered.

Failures begin only in the first `hours`; then `drain_hours` with no demand and no new failure,
so every window elapses before the end. The market is vastsim's shipped one (its hosts' own
failure traits cleared: the mix is the only failure) plus a seeded generated one. Everything is
drawn from `random.Random` seeded by strings, time is the simulator's, and iteration is sorted,
so a seed gives the same dollars every time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import logging
import math
import random
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fleetsim.agents import ContainerFault, Image, Span
from fleetsim.harness import START, Fleet, fleet
from fleetsim.mix import CLASSES, DRAWN, FLEET_MIX, WORKING, Fate, Mix
from reconciler.applying.journal import Journal
from reconciler.applying.search import offer_search
from reconciler.model import cost
from reconciler.model.codec import encode
from reconciler.model.observed import CreateRequest
from reconciler.model.records import Intent, Records, Role, label_for, parse_label
from reconciler.model.spec import ClusterSpec, Watchdogs
from reconciler.planning.offers import unfit_reason
from reconciler.spec.loader import load_texts
from reconciler.state.ledger import read_ledger
from vastsim import Market
from vastsim.billing import Segment
from vastsim.generate import generate_machines
from vastsim.instances import Instance
from vastsim.market import STANDARD_IMAGES, Traits

H = 3600.0
GENERATED_MACHINES = 600


@dataclass(frozen=True)
class Config:
    seed: int = 1
    hours: float = 24.0  # failures begin only in this period
    drain_hours: float = 1.0  # then no demand and no new failure
    step: float = 30.0  # seconds between controller ticks (the 30 s cadence)
    mix: Mix = FLEET_MIX

    @property
    def horizon(self) -> float:
        return START + self.hours * H

    @property
    def end(self) -> float:
        return self.horizon + self.drain_hours * H


def rng(config: Config, *parts: object) -> random.Random:
    """An independent stream per purpose, so one extra rental shifts nothing else."""
    return random.Random(":".join(str(p) for p in (config.seed, *parts)))  # noqa: S311


# --- the scenario: pure functions of the seed ------------------------------------------------


@dataclass(frozen=True)
class Story:
    """What happens to the k-th rental, in seconds after its enrollment."""

    fate: Fate
    fail_after: float  # dies / net-drop
    job: float  # busy until then (math.inf: to the end of the run)
    gaps: tuple[tuple[float, float], ...]  # short quiet stretches inside the job


def story(config: Config, rank: int) -> Story:
    r = rng(config, "rental", rank)
    mix = config.mix
    fates = [f for f in DRAWN if mix.fates.get(f, 0.0) > 0]
    fate = r.choices(fates, weights=[mix.fates[f] for f in fates])[0]
    fail_after = r.uniform(*mix.fail_after_hours) * H
    job = math.inf  # a dying rental is busy until its failure
    if fate is Fate.IDLE:
        job = r.uniform(*mix.job_hours) * H
    elif fate is Fate.HEALTHY:
        job = r.uniform(*mix.long_job_hours) * H
    return Story(fate, fail_after, job, _gaps(config, r, min(job, config.hours * H)))


def _gaps(config: Config, r: random.Random, until: float) -> tuple[tuple[float, float], ...]:
    gaps: list[tuple[float, float]] = []
    mix = config.mix
    at = r.uniform(*mix.gap_every_hours) * H
    while at < until:
        length = r.uniform(*mix.gap_seconds)
        gaps.append((at, at + length))
        at += length + r.uniform(*mix.gap_every_hours) * H
    return tuple(gaps)


def demand_curve(
    config: Config, cluster: str, node_type: str, low: int, high: int
) -> list[tuple[float, int]]:
    """(from, workers) steps of one node type's demand over the period; none in the drain."""
    r = rng(config, "demand", cluster, node_type)
    steps: list[tuple[float, int]] = []
    at = START
    while at < config.horizon:
        steps.append((at, r.randint(low, max(low, high))))
        at += r.uniform(*config.mix.demand_step_hours) * H
    steps.append((config.horizon, 0))
    return steps


def demand_at(curve: Sequence[tuple[float, int]], now: float) -> int:
    value = 0
    for since, workers in curve:
        if since > now:
            break
        value = workers
    return value


def orphan_times(config: Config) -> tuple[float, ...]:
    r = rng(config, "orphans")
    rate = config.mix.orphans_per_day / (24 * H)
    times: list[float] = []
    at = START + r.expovariate(rate) if rate > 0 else math.inf
    while at < config.horizon:
        times.append(at)
        at += r.expovariate(rate)
    return tuple(times)


def market(config: Config) -> Market:
    """vastsim's shipped market without its hosts' failure traits (the mix is the only failure),
    and a seeded generated one beside it, for breadth."""
    shipped = Market.default()
    machines = [dataclasses.replace(m, traits=Traits()) for m in shipped.machines.values()]
    machines += generate_machines(config.seed, GENERATED_MACHINES)
    return Market(machines, images={**STANDARD_IMAGES, **shipped.images})


def default_windows() -> tuple[Watchdogs, int]:
    """The default spec's thresholds (the floor's windows, whatever the user's): the watchdogs,
    and a node type's pull limit."""
    text = (
        "apiVersion: ray-vast/v1\nkind: Cluster\nmetadata: {name: defaults}\nspec:\n"
        "  max_dollars_per_hour: 1\n  node_types:\n    n:\n      max_workers: 1\n"
        "      image: img\n      offer: {filters: {num_gpus: {eq: 1}}}\n"
    )
    spec = load_texts([("defaults.yaml", text)]).clusters[0]
    return spec.watchdogs, spec.node_types["n"].pull_limit_seconds


# --- playing the scenario into one fleet -----------------------------------------------------


@dataclass
class Episode:
    """A stretch of one instance's life with something wrong: from `start` (the failure began;
    for an idle one, its job ended) to `until` (None: the run's end; an idle stretch ends when a
    start brings the worker back for demand)."""

    fate: Fate
    start: float
    earliest: float  # the earliest end the default windows allow
    until: float | None = None


@dataclass
class Tracked:
    """One instance at vast, its story, and what went wrong with it."""

    vast_id: int
    cluster: str
    node_type: str | None
    rank: int
    story: Story
    created_at: float
    enrolled_at: float | None = None
    job_from: float | None = None  # the job under way began (its enrollment, or a restart)
    job_until: float = math.inf
    episodes: list[Episode] = field(default_factory=list)
    jobs: list[tuple[float, float]] = field(default_factory=list)  # (from, until) of each job
    stopped: bool = False
    restarts: int = 0

    @property
    def failed(self) -> bool:
        return any(e.fate is not Fate.IDLE for e in self.episodes)

    def in_job(self, now: float) -> bool:
        if self.job_from is None or self.failed:
            return False
        return self.job_from <= now < self.job_until

    def working(self, now: float) -> bool:
        """What its agent's utilisation sample says now."""
        if self.job_from is None or not self.in_job(now):
            return False
        offset = now - self.job_from
        return not any(a <= offset < b for a, b in self.story.gaps)


@dataclass
class Scenario:
    """Plays the seeded scenario into one fleet and remembers every instance for the accounting."""

    config: Config
    fleet: Fleet
    windows: Watchdogs
    pull_limit: float
    tracked: dict[int, Tracked] = field(default_factory=dict)
    rentals: int = 0
    due: list[tuple[float, int, str, int]] = field(default_factory=list)
    watching: set[int] = field(default_factory=set)
    seq: int = 0

    def install(self) -> None:
        curves = {
            (spec.name, nt.name): demand_curve(
                self.config, spec.name, nt.name, nt.min_workers, nt.max_workers
            )
            for spec in sorted(self.fleet.controller.specs.values(), key=lambda s: s.name)
            for nt in sorted(spec.node_types.values(), key=lambda n: n.name)
        }
        self.fleet.signals.demand_at = lambda now: {
            key: demand_at(curve, now) for key, curve in curves.items()
        }
        self.fleet.agents.next_fault = self._fault
        self.fleet.agents.on_enrolled = self._enrolled
        for k, at in enumerate(orphan_times(self.config)):
            self._schedule(at, "orphan", k)

    def step(self) -> None:
        """After each controller tick: new rentals get their fate, due events happen, a worker
        started again for demand gets a new job."""
        now = self.fleet.clock.now()
        instances = self.fleet.sim.instances
        for vast_id in sorted(set(instances) - set(self.tracked)):
            self._new_rental(vast_id, now)
        for vast_id in sorted(self.watching):
            self._progress(self.tracked[vast_id], instances.get(vast_id))
        for vast_id in sorted(instances):
            self._restarted(self.tracked[vast_id], instances[vast_id].actual_status, now)
        while self.due and self.due[0][0] <= now:
            _, _, what, ident = heapq.heappop(self.due)
            self._happen(what, ident, now)

    def _schedule(self, at: float, what: str, ident: int) -> None:
        self.seq += 1
        heapq.heappush(self.due, (at, self.seq, what, ident))

    def _fault(self, vast_id: int) -> ContainerFault:
        t = self.tracked.get(vast_id)
        return ContainerFault(
            image=Image.IDLES if t is not None and t.story.fate is Fate.BOOT else Image.AGENT,
            working=lambda now: self._working(vast_id, now),
        )

    def _working(self, vast_id: int, now: float) -> bool:
        t = self.tracked.get(vast_id)
        return t.working(now) if t else True

    def _enrolled(self, vast_id: int, now: float) -> None:
        t = self.tracked.get(vast_id)
        if t is None or t.enrolled_at is not None:
            return
        t.enrolled_at = now
        self._begin_job(t, now, t.story.job)
        if t.story.fate in (Fate.DIES, Fate.NET_DROP):
            self._schedule(now + t.story.fail_after, t.story.fate.value, vast_id)

    def _begin_job(self, t: Tracked, now: float, length: float) -> None:
        if t.job_from is not None:
            t.jobs.append((t.job_from, t.job_until))
        t.job_from = now
        if now + length > self.config.horizon:
            length = math.inf  # a job that would end in the drain goes on: no failure begins then
        t.job_until = now + length
        if math.isfinite(length) and t.story.fate in WORKING:
            self._schedule(t.job_until, "job_end", t.vast_id)

    def _restarted(self, t: Tracked, status: str | None, now: float) -> None:
        """A worker whose job had ended, stopped by the money chain and started again (for
        demand that returned), is working again: a new job, as long as the first."""
        if status == "stopped":
            t.stopped = True
            return
        if not (t.stopped and status == "running"):
            return
        t.stopped = False
        if t.failed or t.job_from is None or t.in_job(now) or now >= self.config.horizon:
            return
        for episode in t.episodes:
            if episode.until is None:
                episode.until = now
        t.restarts += 1
        r = rng(self.config, "rental", t.rank, "restart", t.restarts)
        hours = self.config.mix.long_job_hours
        length = r.uniform(*(self.config.mix.job_hours if t.story.fate is Fate.IDLE else hours))
        self._begin_job(t, now, length * H)

    def _new_rental(self, vast_id: int, now: float) -> None:
        """The next rank's fate. A stall's machine is made never to finish loading before the
        instance gets there (it was created this tick, so vast is still provisioning it)."""
        records = self.fleet.controller.records()
        inst = self.fleet.sim.instances[vast_id]
        info = parse_label(inst.label)
        record = records.instances.get(info.record_id) if info is not None else None
        t = Tracked(
            vast_id,
            info.cluster if info is not None else "",
            record.node_type if record is not None else None,
            self.rentals,
            story(self.config, self.rentals),
            now,
        )
        self.rentals += 1
        self.tracked[vast_id] = t
        if t.story.fate is Fate.STALL:
            self.fleet.sim.faults.never_boots(inst.machine.machine_id)
            t.episodes.append(Episode(Fate.STALL, now, now + self._stall_window()))
            self.watching.add(vast_id)
        elif t.story.fate is Fate.BOOT:
            self.fleet.faults[vast_id] = self._fault(vast_id)  # before its container boots
            self.watching.add(vast_id)

    def _stall_window(self) -> float:
        return min(self.pull_limit, self.windows.provision_deadline_seconds)

    def _progress(self, t: Tracked, inst: Instance | None) -> None:
        """What only vast's side shows: a stall's host is healed once its instance is stuck (so
        the next rental there is no stall), and a failed start-up begins when the container runs."""
        if inst is None:
            self.watching.discard(t.vast_id)
            return
        status, running_at = inst.actual_status, inst.first_running_at
        if t.story.fate is Fate.STALL and status == "loading":
            machine = inst.machine
            self.fleet.sim.mutate(
                lambda now: self.fleet.sim.fleet.set_traits(machine, never_boots=False)
            )
            self.watching.discard(t.vast_id)
        if t.story.fate is Fate.BOOT and running_at is not None:
            window = self.windows.enrollment_limit_seconds
            t.episodes.append(Episode(Fate.BOOT, running_at, running_at + window))
            self.watching.discard(t.vast_id)

    def _happen(self, what: str, ident: int, now: float) -> None:
        if what == "orphan":
            self._orphan(ident, now)
            return
        t = self.tracked[ident]
        if ident not in self.fleet.sim.instances or t.failed:
            return  # ended before its failure began
        if what == "job_end":
            if t.job_from is not None and t.job_until <= now and not t.stopped:
                idle = self.windows.idle_stop_after_seconds
                t.episodes.append(Episode(Fate.IDLE, t.job_until, t.job_until + idle))
            return
        if now > self.config.horizon:
            return  # too late to be fair: it stays healthy
        if what == Fate.DIES.value:
            cut = Span(now)
            self.fleet.faults[ident] = dataclasses.replace(
                self.fleet.agents.fault(ident), head_unreachable=cut, vast_unreachable=cut
            )
        else:
            self.fleet.sim.faults.offline(ident)
        agent = self.fleet.agent(ident)
        last = agent.last_heartbeat_success if agent is not None else None
        silent = self.windows.went_silent_after_seconds
        earliest = max(now, (now if last is None else last) + silent)
        t.episodes.append(Episode(Fate(what), now, earliest))

    def _orphan(self, k: int, now: float) -> None:
        """An instance with our label and no record, on one of the cheapest offers that fit one
        of the node types (drawn from the seed)."""
        f = self.fleet
        r = rng(self.config, "orphan", k)
        choices = [
            (spec, nt)
            for spec in sorted(f.controller.specs.values(), key=lambda s: s.name)
            for nt in sorted(spec.node_types.values(), key=lambda n: n.name)
        ]
        if not choices:
            return
        spec, node_type = choices[r.randrange(len(choices))]
        offers = [
            o
            for o in f.client.search_offers(offer_search(node_type))
            if unfit_reason(o, node_type) is None
        ]
        if not offers:
            return
        offer = offers[r.randrange(min(10, len(offers)))]
        label = label_for(spec.name, f.controller.journal.lineage, f"orphan{k}")
        created = f.client.create_instance(
            offer.id,
            CreateRequest(image=node_type.image, disk_gb=node_type.disk_gb, label=label),
        )
        t = Tracked(
            created.instance_id,
            spec.name,
            None,
            -1 - k,
            Story(Fate.ORPHAN, 0.0, 0.0, ()),
            now,
        )
        t.episodes.append(Episode(Fate.ORPHAN, now, now + self.windows.orphan_grace_seconds))
        self.tracked[created.instance_id] = t


@dataclass
class TypedJournal(Journal):
    """The controller's journal, keeping the typed records instead of re-encoding the whole state
    at every save (the fleet benchmark's: no decision reads what the round trip produces, and it
    would dominate a long run); the ledger is still the real `LedgerWriter`."""

    _current: Records | None = None
    _saves: int = 0

    @property
    def serial(self) -> int:
        return self.snapshot.serial + self._saves

    def records(self) -> Records:
        return self._current if self._current is not None else super().records()

    def save(self, records: Records) -> None:
        if records == self.records():
            return
        self._current = records
        self._saves += 1


# --- accounting ------------------------------------------------------------------------------


def meter_cost(segments: Sequence[Segment], start: float, end: float) -> float:
    """Dollars billed between `start` and `end` by these meter segments."""
    return math.fsum(
        max(0.0, min(end if s.end is None else s.end, end) - max(s.start, start)) * s.rate / H
        for s in segments
    )


def ended_at(segments: Sequence[Segment], after: float) -> float | None:
    """The first stop at or after `after`, else the destroy (a stop releases the GPU)."""
    for s in segments:
        if s.status == "stopped" and s.start >= after:
            return s.start
    last = segments[-1] if segments else None
    return last.end if last is not None else None


def _ends(segments: Sequence[Segment]) -> list[float]:
    """Every stop and the destroy."""
    stops = [s.start for s in segments if s.status == "stopped"]
    last = segments[-1] if segments else None
    return stops + ([last.end] if last is not None and last.end is not None else [])


@dataclass(frozen=True)
class ClassRow:
    fate: Fate
    failures: int
    ended: int
    latency: tuple[float, float, float]  # median, p95, max in seconds (inf: one never ended)
    wasted: float
    floor: float

    @property
    def ratio(self) -> float:
        return ratio_of(self.wasted, self.floor)


@dataclass(frozen=True)
class ClusterRow:
    name: str
    cap: float  # max_dollars_per_hour
    meter: float  # what vastsim's meter billed
    dollars: float  # what `ray-vast cost` says
    by_cause: Mapping[cost.Cause, float]


@dataclass(frozen=True)
class Result:
    config: Config
    clusters: tuple[ClusterRow, ...]
    classes: tuple[ClassRow, ...]
    rentals: int
    false_destroys: Mapping[str, int]  # by why the machine was ended (its record's reason)
    leaks: int
    leak_dph: float
    kept_at_minimum: int  # idle workers min_workers keeps up (not leaks)
    worked_hours: float
    seconds: float  # wall time: never part of a comparison

    @property
    def meter(self) -> float:
        return math.fsum(c.meter for c in self.clusters)

    @property
    def dollars(self) -> float:
        return math.fsum(c.dollars for c in self.clusters)

    @property
    def wasted(self) -> float:
        return math.fsum(c.wasted for c in self.classes)

    @property
    def floor(self) -> float:
        return math.fsum(c.floor for c in self.classes)


def ratio_of(wasted: float, floor: float) -> float:
    if floor > 0:
        return wasted / floor
    return 1.0 if wasted == 0 else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank; a failure that never ended (inf) is slower than any that did."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


@dataclass(frozen=True)
class _Outcome:
    fate: Fate
    ended: float | None
    start: float
    wasted: float
    floor: float


def account(scenario: Scenario, seconds: float) -> Result:
    """Everything at the end of the run: the dollars from the records and the ledger, from the
    meter, and the failures' waste against the floor."""
    config, f = scenario.config, scenario.fleet
    meter = f.sim.meter
    end = config.end
    records = f.controller.records()
    known = dict(cost.lives_from_ledger(read_ledger(f.ledger)))
    for record in records.instances.values():
        life = cost.life_of(record)
        if life is not None:
            known[life.instance] = life
    charges = cost.charges(known.values(), since=None, until=end)
    by_cluster = cost.group(charges, "cluster")
    clusters = tuple(
        ClusterRow(
            spec.name,
            spec.max_dollars_per_hour,
            meter.label_prefix(f"rv.{spec.name}.", at=end),
            by_cluster[spec.name].dollars if spec.name in by_cluster else 0.0,
            by_cluster[spec.name].by_cause if spec.name in by_cluster else {},
        )
        for spec in sorted(f.controller.specs.values(), key=lambda s: s.name)
    )
    lives = {life.vast_id: life for life in known.values() if life.vast_id is not None}
    reasons = {r.vast_id: r.ended_reason or "ended" for r in records.instances.values()}
    kept = _kept_at_minimum(f, records)
    tail = scenario.windows.idle_destroy_after_seconds - scenario.windows.idle_stop_after_seconds
    outcomes: list[_Outcome] = []
    false_destroys: dict[str, int] = {}
    leaks: list[int] = []
    worked = 0.0
    for t in sorted(scenario.tracked.values(), key=lambda t: t.vast_id):
        segments = meter.segments(t.vast_id)
        last = t.episodes[-1] if t.episodes else None
        for episode in t.episodes:
            if episode is last and episode.fate is Fate.IDLE and t.vast_id in kept:
                continue  # min_workers keeps it, quiet or not: its idle dollars are by design
            outcomes.append(_outcome(episode, segments, end, tail))
        open_end = last is not None and last.until is None and t.vast_id not in kept
        if open_end and last is not None and _billing_in_full(segments, last, end):
            leaks.append(t.vast_id)
        life = lives.get(t.vast_id)
        extra = life is not None and life.fate is cost.Cause.EXTRA
        by_design = t.story.fate is Fate.ORPHAN or extra
        if not by_design:
            for at in _ends(segments):
                if at <= end and _healthy(t, at):
                    why = reasons.get(t.vast_id, "ended")
                    false_destroys[why] = false_destroys.get(why, 0) + 1
        worked += _worked(t, segments, end)
    classes = tuple(_class_row(fate, outcomes) for fate in CLASSES)
    return Result(
        config,
        clusters,
        classes,
        scenario.rentals,
        false_destroys,
        len(leaks),
        math.fsum(meter.rate(v) for v in leaks),
        len(kept),
        worked / H,
        seconds,
    )


def _kept_at_minimum(f: Fleet, records: Records) -> set[int]:
    """Workers still running at the end that `min_workers` keeps (the money chain leaves the
    last ones of a node type up, quiet or not)."""
    kept: set[int] = set()
    for spec in f.controller.specs.values():
        for node_type in spec.node_types.values():
            if node_type.min_workers <= 0:
                continue
            live = [
                r.vast_id
                for r in records.instances.values()
                if r.cluster == spec.name
                and r.node_type == node_type.name
                and r.live
                and r.vast_id is not None
                and r.role is Role.WORKER
                and r.intent is Intent.RUNNING
            ]
            if len(live) <= node_type.min_workers:
                kept.update(v for v in live if v is not None)
    return kept


def _outcome(episode: Episode, segments: Sequence[Segment], end: float, tail: float) -> _Outcome:
    until = min(end, episode.until) if episode.until is not None else end
    ended = ended_at(segments, episode.start)
    if ended is not None and ended > until:
        ended = None if episode.until is None else episode.until
    wasted = meter_cost(segments, episode.start, until)
    stop = episode.earliest if ended is None else min(episode.earliest, ended)
    floor = meter_cost(segments, episode.start, min(stop, until))
    if episode.fate is Fate.IDLE:
        storage = min((s.rate for s in segments), default=0.0)
        floor += storage * max(0.0, min(tail, until - stop)) / H
    return _Outcome(episode.fate, ended, episode.start, wasted, min(wasted, floor))


def _billing_in_full(segments: Sequence[Segment], episode: Episode, end: float) -> bool:
    """Still billing at the end and never stopped or ended since the failure began."""
    ended = ended_at(segments, episode.start)
    return ended is None or ended > end


def _healthy(t: Tracked, at: float) -> bool:
    """Nothing was wrong with it at `at`: booting (no failure yet), or inside its job."""
    if any(e.start <= at < (math.inf if e.until is None else e.until) for e in t.episodes):
        return False
    return t.enrolled_at is None or t.in_job(at) or any(a <= at < b for a, b in t.jobs)


def _worked(t: Tracked, segments: Sequence[Segment], end: float) -> float:
    """Busy seconds: each job from its start to its end, a failure, a stop or the end."""
    if t.job_from is None:
        return 0.0
    jobs = [*t.jobs, (t.job_from, t.job_until)]
    failures = [e.start for e in t.episodes if e.fate is not Fate.IDLE]
    total = 0.0
    for start, until in jobs:
        stops = [until, end, *failures]
        gone = ended_at(segments, start)
        if gone is not None:
            stops.append(gone)
        total += max(0.0, min(stops) - start)
    return total


def _class_row(fate: Fate, outcomes: Sequence[_Outcome]) -> ClassRow:
    mine = [o for o in outcomes if o.fate is fate]
    latencies = [math.inf if o.ended is None else o.ended - o.start for o in mine]
    return ClassRow(
        fate,
        len(mine),
        sum(1 for o in mine if o.ended is not None),
        (percentile(latencies, 0.5), percentile(latencies, 0.95), percentile(latencies, 1.0)),
        math.fsum(o.wasted for o in mine),
        math.fsum(o.floor for o in mine),
    )


# --- one run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _temporary_files_in_memory() -> Iterator[None]:
    """The harness keeps its ledger in a temporary directory and fsyncs every line; on
    /dev/shm that costs no disk flush (and changes no figure)."""
    old = tempfile.tempdir
    shm = "/dev/shm"  # noqa: S108 - mkdtemp makes a private directory in it
    if Path(shm).is_dir():
        tempfile.tempdir = shm
    try:
        yield
    finally:
        tempfile.tempdir = old


def simulate(
    specs: Sequence[ClusterSpec], config: Config, *, state_dir: Path | None = None
) -> Result:
    """The specs through the whole scenario, on a fresh simulator and state. `state_dir`: keep
    the run's state file and ledger there (for `ray-vast cost`, `ledger`, `state` on it)."""
    started = time.perf_counter()
    # the heads say each worker's report in their log; the ledger keeps it
    logging.getLogger("reconciler.head").addHandler(logging.NullHandler())
    windows, pull_limit = default_windows()
    with (
        _temporary_files_in_memory(),
        fleet(list(specs), market=market(config), state_dir=state_dir) as f,
    ):
        j = f.controller.journal
        typed = TypedJournal(j.store, j.ledger, j.snapshot)
        f.controller.use_journal(typed)
        scenario = Scenario(config, f, windows=windows, pull_limit=float(pull_limit))
        scenario.install()
        f.run_until(config.end, step=config.step, each=scenario.step)
        result = account(scenario, time.perf_counter() - started)
        if state_dir is not None:  # the typed journal saved nothing: the state as it ends
            typed.store.write(encode(typed.records()), based_on=typed.snapshot)
        return result
