"""The seeded scenario of a fleet simulation, and how it is played into one fleet.

The scenario is pure functions of the seed: each rental's story (its fate from `fleetsim.mix`, its
job, the short quiet gaps inside it), Ray's demand as a step curve per node type, and the times
orphans appear. `Scenario` plays it into a `fleetsim.harness.Fleet` at the containers' boundary
and on vastsim's side, and remembers, per instance, every stretch in which something was wrong
with it (`Episode`) for the accounting (`fleetsim.simulate`).

A worker the money chain stopped (its disk kept) and Ray's demand started again resumes with the
work that brought it back: a fresh story, drawn as a working rental's (`idle` or `healthy`, as
the mix weighs them) from a stream of its own; an idle stretch it was in ends there. Without it a
started-again worker would stay quiet forever.

Everything is drawn from `random.Random` seeded by strings (`seed:rental:k`: the k-th rental of
two runs of the same seed meets the same fate, however the runs differ in what they rent), time
is the simulator's and iteration is sorted, so a seed gives the same dollars every time.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fleetsim.agents import ContainerFault, Image, Span
from fleetsim.harness import START, Fleet
from fleetsim.mix import DRAWN, FLEET_MIX, WORKING, Fate, Mix
from reconciler.applying.search import offer_search
from reconciler.model.labels import label_for, parse_label
from reconciler.model.observed import CreateRequest
from reconciler.model.spec import Watchdogs
from reconciler.planning.offers import unfit_reason
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml
from vastsim.instances import Instance

H = 3600.0


@dataclass(frozen=True)
class Config:
    seed: int = 1
    hours: float = 24.0  # failures begin only in this period
    drain_hours: float = 1.0  # then no demand and no new failure, so every window elapses
    step: float = 30.0  # seconds between controller ticks (the 30 s cadence)
    mix: Mix = FLEET_MIX
    # Ray's demand for a (cluster, node type) steps between these workers; a node type not named
    # here steps between its min_workers and max_workers
    demand: Mapping[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # the fates of the first rentals, in order, before the mix draws the rest (the fleet
    # benchmark's quick run: every failure class at least once, however few rentals it makes)
    first_fates: tuple[Fate, ...] = ()
    # Ray's demand as tasks of each node type's shape with no node-type label, which any node
    # type they fit may take (how `scheduling` is compared); False: each held to its node type.
    by_shape: bool = False

    @property
    def horizon(self) -> float:
        return START + self.hours * H

    @property
    def end(self) -> float:
        return self.horizon + self.drain_hours * H


def rng(config: Config, *parts: object) -> random.Random:
    """An independent stream per purpose, so one extra rental shifts nothing else."""
    return random.Random(":".join(str(p) for p in (config.seed, *parts)))  # noqa: S311


def default_windows() -> tuple[Watchdogs, int]:
    """The default spec's thresholds (the floor's windows, whatever the user's): the watchdogs,
    and a node type's pull limit."""
    text = spec_yaml(
        "defaults",
        "max_dollars_per_hour: 1\nnode_types:\n  n:\n    max_workers: 1\n"
        "    image: img\n    offer: {filters: {num_gpus: {eq: 1}}}\n",
    )
    spec = load_texts([("defaults.yaml", text)]).clusters[0]
    return spec.watchdogs, spec.node_types["n"].pull_limit_seconds


# --- the scenario: pure functions of the seed ------------------------------------------------


@dataclass(frozen=True)
class Story:
    """What happens to the k-th rental (or a stint after a resume), in seconds after its job
    began."""

    fate: Fate
    fail_after: float  # dies / net-drop
    job: float  # busy until then (math.inf: to the end of the run)
    gaps: tuple[tuple[float, float], ...]  # short quiet stretches inside the job


def story(config: Config, rank: int) -> Story:
    r = rng(config, "rental", rank)
    mix = config.mix
    fates = [f for f in DRAWN if mix.fates.get(f, 0.0) > 0]
    fate = r.choices(fates, weights=[mix.fates[f] for f in fates])[0]
    if rank < len(config.first_fates):
        fate = config.first_fates[rank]
    fail_after = r.uniform(*mix.fail_after_hours) * H
    job = math.inf  # a dying rental is busy until its failure
    if fate is Fate.IDLE:
        job = r.uniform(*mix.job_hours) * H
    elif fate is Fate.HEALTHY:
        job = r.uniform(*mix.long_job_hours) * H
    return Story(fate, fail_after, job, _gaps(config, r, min(job, config.hours * H)))


def resumed_story(config: Config, rank: int, stint: int) -> Story:
    """What a worker started again for demand goes through, from a stream of its own: a working
    rental's job (`idle` or `healthy`), or a failure that strikes a running machine (`dies`,
    `net-drop`), weighted as the mix weighs them. Not a stall nor a boot failure: a start does not
    pull, and its image has served already. Without the failures a fleet that is mostly stopped
    and started again would hold only its first rentals' failures."""
    r = rng(config, "rental", rank, "resumed", stint)
    mix = config.mix
    fates = [f for f in DRAWN if f in AFTER_A_START and mix.fates.get(f, 0.0) > 0] or [Fate.IDLE]
    fate = r.choices(fates, weights=[mix.fates.get(f, 0.0) or 1.0 for f in fates])[0]
    fail_after = r.uniform(*mix.fail_after_hours) * H
    job = math.inf  # a dying worker is busy until its failure
    if fate in WORKING:
        job = r.uniform(*(mix.job_hours if fate is Fate.IDLE else mix.long_job_hours)) * H
    return Story(fate, fail_after, job, _gaps(config, r, min(job, config.hours * H)))


# What may happen to a machine started again (see `resumed_story`).
AFTER_A_START = WORKING | {Fate.DIES, Fate.NET_DROP}


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
    stint: int = 0  # the stint it happened in (see `Tracked.stint`)


@dataclass
class Tracked:
    """One instance at vast, its story, and what went wrong with it."""

    vast_id: int
    cluster: str
    node_type: str | None
    rank: int
    story: Story  # the current stint's
    created_at: float
    enrolled_at: float | None = None
    job_from: float | None = None  # the job under way began (its enrollment, or a resume)
    job_until: float = math.inf
    episodes: list[Episode] = field(default_factory=list)
    jobs: list[tuple[float, float]] = field(default_factory=list)  # (from, until) of past jobs
    stint: int = 0  # 0: the rental's own; n: the n-th resume after a deliberate stop

    @property
    def failed(self) -> bool:
        """A failure (not idleness) began in the current stint."""
        return any(e.fate is not Fate.IDLE and e.stint == self.stint for e in self.episodes)

    def in_job(self, now: float) -> bool:
        if self.job_from is None or self.failed:
            return False
        return self.job_from <= now < self.job_until

    def working(self, now: float) -> bool:
        """What its agent's utilisation sample says now (short quiet gaps are part of the job,
        and say quiet)."""
        if self.job_from is None or not self.in_job(now):
            return False
        offset = now - self.job_from
        return not any(a <= offset < b for a, b in self.story.gaps)


@dataclass
class Scenario:
    """Plays the seeded scenario into one fleet (fates on new rentals, failures when due,
    orphans, the demand curves, fresh work on a resume) and remembers every instance for the
    accounting."""

    config: Config
    fleet: Fleet
    windows: Watchdogs  # the default spec's thresholds: the floor's windows
    pull_limit: float
    tracked: dict[int, Tracked] = field(default_factory=dict)
    rentals: int = 0
    # (at, seq, what, vast id or orphan number, stint)
    due: list[tuple[float, int, str, int, int]] = field(default_factory=list)
    watching: set[int] = field(default_factory=set)  # stalls and failed start-ups in progress
    seq: int = 0

    def install(self) -> None:
        curves = {
            (spec.name, nt.name): demand_curve(
                self.config,
                spec.name,
                nt.name,
                *self.config.demand.get((spec.name, nt.name), (nt.min_workers, nt.max_workers)),
            )
            for spec in sorted(self.fleet.controller.specs.values(), key=lambda s: s.name)
            for nt in sorted(spec.node_types.values(), key=lambda n: n.name)
        }
        self.fleet.signals.demand_at = lambda now: {
            key: demand_at(curve, now) for key, curve in curves.items()
        }
        self.fleet.signals.by_shape = self.config.by_shape
        self.fleet.agents.next_fault = self._fault
        self.fleet.agents.on_enrolled = self._enrolled
        self.fleet.agents.on_resumed = self._resumed
        for k, at in enumerate(orphan_times(self.config)):
            self._schedule(at, "orphan", k)

    def step(self) -> None:
        """After each controller tick: new rentals get their fate, due events happen."""
        now = self.fleet.clock.now()
        instances = self.fleet.sim.instances
        for vast_id in sorted(set(instances) - set(self.tracked)):
            self._new_rental(vast_id, now)
        for vast_id in sorted(self.watching):
            self._progress(self.tracked[vast_id], instances.get(vast_id))
        while self.due and self.due[0][0] <= now:
            _, _, what, ident, stint = heapq.heappop(self.due)
            self._happen(what, ident, stint, now)

    def _schedule(self, at: float, what: str, ident: int, stint: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.due, (at, self.seq, what, ident, stint))

    def _fault(self, vast_id: int) -> ContainerFault:
        """Each container's boundary: its node's work from its story (and the image a failed
        start-up has); set on the rental, read by the agent at its boot."""
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
        self._begin_stint(t, now)

    def _resumed(self, vast_id: int, now: float) -> None:
        """A worker started again after a deliberate stop: what was wrong with it ends, and a
        new stint begins with the work that brought it back."""
        t = self.tracked.get(vast_id)
        if t is None:
            return
        for episode in t.episodes:
            if episode.until is None:
                episode.until = now
        t.stint += 1
        t.story = resumed_story(self.config, t.rank, t.stint)
        self._begin_stint(t, now)

    def _begin_stint(self, t: Tracked, now: float) -> None:
        """Its story starts: the job, and the failure it holds in store."""
        self._begin_job(t, now, t.story.job)
        if t.story.fate in (Fate.DIES, Fate.NET_DROP):
            self._schedule(now + t.story.fail_after, t.story.fate.value, t.vast_id, t.stint)

    def _begin_job(self, t: Tracked, now: float, length: float) -> None:
        if t.job_from is not None:
            t.jobs.append((t.job_from, t.job_until))
        t.job_from = now
        if now + length > self.config.horizon:
            length = math.inf  # a job that would end in the drain goes on: no failure begins then
        t.job_until = now + length
        if math.isfinite(length) and t.story.fate in WORKING:
            self._schedule(t.job_until, "job_end", t.vast_id, t.stint)

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
            window = min(self.pull_limit, self.windows.provision_deadline_seconds)
            t.episodes.append(Episode(Fate.STALL, now, now + window))
            self.watching.add(vast_id)
        elif t.story.fate is Fate.BOOT:
            self.fleet.faults[vast_id] = self._fault(vast_id)  # before its container boots
            self.watching.add(vast_id)

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

    def _happen(self, what: str, ident: int, stint: int, now: float) -> None:
        if what == "orphan":
            self._orphan(ident, now)
            return
        t = self.tracked[ident]
        inst = self.fleet.sim.instances.get(ident)
        if inst is None or t.failed or stint != t.stint:
            return  # ended before its failure began, or a past stint's event
        if what == "job_end":
            if t.job_until <= now and inst.actual_status != "stopped":
                idle = self.windows.idle_stop_after_seconds
                t.episodes.append(Episode(Fate.IDLE, t.job_until, t.job_until + idle, None, stint))
            return
        if now > self.config.horizon:
            return  # too late to be fair: it stays healthy
        struck = [t]
        if what == Fate.DIES.value:
            cut = Span(now)
            self.fleet.faults[ident] = dataclasses.replace(
                self.fleet.agents.fault(ident), head_unreachable=cut, vast_unreachable=cut
            )
        else:
            struck += self._beside(inst)  # the host drops: every instance on it drops with it
            self.fleet.sim.faults.offline(ident)
        for hit in struck:
            hit.episodes.append(
                Episode(Fate(what), now, self._earliest_silent(hit, now), None, hit.stint)
            )

    def _beside(self, inst: Instance) -> list[Tracked]:
        """The other live instances on the same host that no failure has struck yet."""
        out = []
        for other in sorted(self.tracked.values(), key=lambda o: o.vast_id):
            there = self.fleet.sim.instances.get(other.vast_id)
            if there is None or there is inst or there.machine is not inst.machine:
                continue
            if there.actual_status in ("running", "loading") and not other.failed:
                out.append(other)
        return out

    def _earliest_silent(self, t: Tracked, now: float) -> float:
        agent = self.fleet.agent(t.vast_id)
        last = agent.last_heartbeat_success if agent is not None else None
        return max(now, (now if last is None else last) + self.windows.went_silent_after_seconds)

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
