"""Money lost per failure class: four ending policies on the same seeded fleet (issue 9).

How to run (from the repository root)::

    .venv/bin/python bench/fleet.py              # 72 simulated hours, ~420 rentals (ray-vast)
    .venv/bin/python bench/fleet.py --seed 7     # another scenario
    .venv/bin/python bench/fleet.py --quick      # a tiny run (what the smoke test uses)

What it measures. One cluster runs on virtual time against an in-process vastsim with every part
of the engine real (`bench.harness`: planner, listing checks, nets, money chain, executor,
ledger, the head's `HeadApp`), and every container of ours runs the agent's own state machine
(`bench.agents`); failures are injected at the container's boundary or by vastsim. Ray's demand
is a seeded step curve, so the cluster rents, loses and replaces machines all period long. Every
rental draws a fate from a seeded mix, keyed by its rank (the k-th rental of every policy gets
the k-th fate), and orphans appear at seeded times:

- `stall`: provisioning stalls (the host never finishes loading: vastsim `never_boots`);
- `boot`: the container runs but the image's PID 1 never starts the agent (it never enrolls);
- `dies`: the worker's container loses its network while the instance keeps running: no
  heartbeat, no report and no self-destroy gets out, so only the head's side can end it (the
  agent gives up after 300 s and keeps trying to destroy itself, in vain);
- `net-drop`: the network path drops (vastsim takes the host `offline`, as the virtual-day test);
- `orphan`: an instance at vast with our label and no record here (a crash between create and
  save);
- `idle`: a worker whose job ended: it keeps heartbeating, quiet, and bills until something ends
  it. Every rental that does not fail ends its job this way; the `idle` fate has short jobs
  (minutes to an hour), `healthy` long ones (hours). Jobs have short quiet gaps, shorter than the
  stop timer, so clearing the money chain's timers is exercised all along. The money chain's
  stop keeps the disk (DESIGN.md 10): the worker bills storage until the destroy timer, unless
  Ray's demand comes back first, when the planner starts it again instead of renting. A worker
  started again takes the work whose demand started it: its instance begins a new stint, with a
  job drawn as a working rental's (`idle` or `healthy`, by the mix, from its own stream); each
  stint is accounted on its own, the last one from its failure to its instance's next start.

Per failure class: the dollars vastsim's meter billed after the failure began (from the instance's
meter segments, to the run's end), the detection latency (failure start -> the instance's first
stop or destroy, from the meter), and the machines ended. Overall: false destroys (a machine
ended while nothing was wrong with it: still booting, or inside its job), leaks (a failed or idle
instance still billing at the end and not stopped; no failure begins in the last `drain_hours`,
longer than every window of every policy, so nothing still billing then is going to be ended),
the total waste, and the work delivered (busy worker-hours), so that a policy cannot look cheap
by doing less.

The floor is the waste if every failure were caught at the earliest moment the default spec's
window allows, priced from the instance's own meter over that window (so an instance that bills
storage only while stalled or offline is floored at storage): a stall `min(pull limit,
provisioning deadline)` after its create, a failed start-up `enrollment_limit` after it first ran,
a dead worker or a dropped path `went_silent_after` after its last heartbeat, an orphan
`orphan_grace` after it was created, an idle worker stopped `idle_stop_after` after its job ended
and destroyed `idle_destroy_after` after that (storage in between). Each policy is held to the
floor of the failures it met. Cadences are not in the floor, so even a perfect policy sits above
1.

Scale. A 1,000-rental week does not fit in five minutes on two shared cores: the engine lists
vast every minute (in-process HTTP and parsing) and the agents heartbeat every 30 s, about 0.7 s
of CPU per simulated hour at 10-15 workers. So the full run is 72 hours with short jobs: about
420 rentals under ray-vast (fewer under the others, whose dead machines hold their slots), 2.5 to
3.5 minutes for the four policies; `--hours` runs a longer one. ray-vast's figures hold within a
few percent across seeds; the other policies' ratios grow with the period, because a leak bills
until the run ends. The journal keeps typed records instead of re-encoding the whole state at
every save (`TypedJournal`; `--real-store` gives the same figures, ten times slower).

Determinism: the scenario comes from `random.Random` seeded by strings (`seed:rental:k`), time is
the simulator's virtual clock, iteration is sorted, and no figure reads the wall clock, so the
same seed prints the same dollars.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import heapq
import logging
import math
import random
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/fleet.py`: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import composed
from bench.agents import ContainerFault, Image, Span
from bench.harness import START, Fleet, fleet
from bench.policies import POLICIES, RAY_VAST, Policy
from reconciler.applying.journal import Journal
from reconciler.applying.search import offer_search
from reconciler.model.observed import CreateRequest
from reconciler.model.records import Records, label_for
from reconciler.model.spec import ClusterSpec, Watchdogs
from reconciler.planning.offers import unfit_reason
from reconciler.spec.loader import load_texts
from vastsim import Market
from vastsim.billing import Segment
from vastsim.generate import generate_machines
from vastsim.instances import Instance
from vastsim.market import STANDARD_IMAGES

H = 3600.0
CLUSTER = "fleet"
NODE_TYPE = "gpu"
IMAGE = "rayproject/ray:2.60.0-py311-cpu"
DISK_GB = 40


class Fate(StrEnum):
    STALL = "stall"
    BOOT = "boot"
    DIES = "dies"
    NET_DROP = "net-drop"
    ORPHAN = "orphan"
    IDLE = "idle"
    HEALTHY = "healthy"


# The failure classes of the table, in the order of a machine's life.
CLASSES: tuple[Fate, ...] = (
    Fate.STALL,
    Fate.BOOT,
    Fate.DIES,
    Fate.NET_DROP,
    Fate.ORPHAN,
    Fate.IDLE,
)
WORKING_FATES = frozenset({Fate.IDLE, Fate.HEALTHY})


@dataclass(frozen=True)
class Config:
    """One scenario: its period, demand curve, failure mix and market, all drawn from `seed`."""

    seed: int
    hours: float  # failures begin only in this period
    drain_hours: float  # then no demand and no new failure, so every window elapses
    demand: tuple[int, int]  # the workers Ray wants: a step curve between these
    demand_step_hours: tuple[float, float]
    mix: Mapping[Fate, float]  # weights of the fates a rental draws (orphans come on their own)
    orphans_per_day: float
    job_hours: tuple[float, float]  # an `idle` rental's job, then it is quiet
    long_job_hours: tuple[float, float]  # a `healthy` rental's job, then it is quiet
    fail_after_hours: tuple[float, float]  # `dies` / `net-drop`: after enrollment
    gap_every_hours: tuple[float, float]  # short quiet gaps inside a job ...
    gap_seconds: tuple[float, float]  # ... shorter than the stop timer: they must end nothing
    machines: int
    step: float = 30.0  # seconds between agent actions and controller ticks (the 30 s cadence)
    # the fates of the first rentals, in order, before the mix draws the rest (the quick run's:
    # every failure class at least once, however few rentals the policy makes)
    first_fates: tuple[Fate, ...] = ()

    @property
    def horizon(self) -> float:
        return START + self.hours * H

    @property
    def end(self) -> float:
        return self.horizon + self.drain_hours * H


MIX: Mapping[Fate, float] = {
    Fate.STALL: 0.06,
    Fate.BOOT: 0.06,
    Fate.DIES: 0.10,
    Fate.NET_DROP: 0.06,
    Fate.IDLE: 0.36,
    Fate.HEALTHY: 0.36,
}
FULL = Config(
    seed=1,
    hours=72.0,
    drain_hours=1.0,
    demand=(6, 16),
    demand_step_hours=(1.0, 4.0),
    mix=MIX,
    orphans_per_day=8.0,
    job_hours=(0.2, 1.0),
    long_job_hours=(1.0, 6.0),
    fail_after_hours=(0.25, 4.0),
    gap_every_hours=(0.5, 3.0),
    gap_seconds=(60.0, 420.0),
    machines=300,
)
QUICK = dataclasses.replace(
    FULL,
    hours=3.0,
    demand=(3, 5),
    demand_step_hours=(0.5, 1.5),
    orphans_per_day=16.0,
    job_hours=(0.2, 1.0),
    long_job_hours=(1.0, 3.0),
    fail_after_hours=(0.1, 1.0),
    machines=120,
    first_fates=(Fate.STALL, Fate.BOOT, Fate.DIES, Fate.NET_DROP, Fate.IDLE),
)


# --- the scenario: pure functions of the seed ------------------------------------------------


@dataclass(frozen=True)
class Story:
    """What happens to the k-th rental, in seconds after its enrollment."""

    fate: Fate
    fail_after: float  # dies / net-drop
    job: float  # busy until then (math.inf: to the end of the run)
    gaps: tuple[tuple[float, float], ...]  # short quiet stretches inside the job


def rng(config: Config, *parts: object) -> random.Random:
    """An independent stream per purpose, so one policy's extra rental shifts nothing else."""
    return random.Random(":".join(str(p) for p in (config.seed, *parts)))


def story(config: Config, rank: int) -> Story:
    r = rng(config, "rental", rank)
    fates = sorted(config.mix)
    fate = r.choices(fates, weights=[config.mix[f] for f in fates])[0]
    if rank < len(config.first_fates):
        fate = config.first_fates[rank]
    fail_after = r.uniform(*config.fail_after_hours) * H
    job = math.inf  # a dying rental is busy until its failure
    if fate is Fate.IDLE:
        job = r.uniform(*config.job_hours) * H
    elif fate is Fate.HEALTHY:
        job = r.uniform(*config.long_job_hours) * H
    return Story(fate, fail_after, job, _gaps(config, r, min(job, config.hours * H)))


def resumed_story(config: Config, vast_id: int, stint: int) -> Story:
    """The work a worker started again for demand takes on: a working rental's job (`idle` or
    `healthy`, weighted as the mix weighs them), from a stream of its own."""
    r = rng(config, "resumed", vast_id, stint)
    fates = sorted(WORKING_FATES)
    fate = r.choices(fates, weights=[config.mix.get(f, 0.0) for f in fates])[0]
    hours = config.job_hours if fate is Fate.IDLE else config.long_job_hours
    job = r.uniform(*hours) * H
    return Story(fate, 0.0, job, _gaps(config, r, min(job, config.hours * H)))


def _gaps(config: Config, r: random.Random, until: float) -> tuple[tuple[float, float], ...]:
    gaps: list[tuple[float, float]] = []
    at = r.uniform(*config.gap_every_hours) * H
    while at < until:
        length = r.uniform(*config.gap_seconds)
        gaps.append((at, at + length))
        at += length + r.uniform(*config.gap_every_hours) * H
    return tuple(gaps)


def demand_curve(config: Config) -> tuple[tuple[float, int], ...]:
    """(from, workers) steps over the period; nothing is wanted in the drain."""
    r = rng(config, "demand")
    steps: list[tuple[float, int]] = []
    at = START
    while at < config.horizon:
        steps.append((at, r.randint(*config.demand)))
        at += r.uniform(*config.demand_step_hours) * H
    steps.append((config.horizon, 0))
    return tuple(steps)


def demand_at(curve: Sequence[tuple[float, int]], now: float) -> int:
    value = 0
    for since, workers in curve:
        if since > now:
            break
        value = workers
    return value


def orphan_times(config: Config) -> tuple[float, ...]:
    r = rng(config, "orphans")
    rate = config.orphans_per_day / (24 * H)
    times: list[float] = []
    at = START + r.expovariate(rate) if rate > 0 else math.inf
    while at < config.horizon:
        times.append(at)
        at += r.expovariate(rate)
    return tuple(times)


def market(config: Config) -> Market:
    """Single-GPU RTX 4090 machines (one rental per machine at a time) at seeded prices."""
    r = rng(config, "market")
    machines = [
        dataclasses.replace(
            m,
            num_gpus=1,
            gpu_name="RTX 4090",
            gpu_ram_gb=24,
            dph_base=round(r.uniform(0.28, 0.55), 4),
        )
        for m in generate_machines(config.seed, config.machines)
    ]
    return Market(machines, images=STANDARD_IMAGES)


def spec_for(config: Config, policy: Policy) -> ClusterSpec:
    """The cluster, with the policy's overrides (spec defaults everywhere else)."""
    watchdogs = "".join(f"\n    {k}: {v}" for k, v in sorted(policy.watchdogs.items()))
    node_extra = "".join(f"\n      {k}: {v}" for k, v in sorted(policy.node_type.items()))
    text = f"""\
apiVersion: ray-vast/v1
kind: Cluster
metadata: {{name: {CLUSTER}}}
spec:
  max_dollars_per_hour: {config.demand[1] * 2}
  node_types:
    {NODE_TYPE}:
      min_workers: 0
      max_workers: {config.demand[1]}
      candidate_factor: 1
      image: {IMAGE}
      disk_gb: {DISK_GB}
      offer:
        filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 4090}}}}
        min_reliability: 0.9{node_extra}
  watchdogs:{watchdogs or " {}"}
"""
    loaded = load_texts([(f"{CLUSTER}.yaml", text)])
    if not loaded.ok:
        raise SystemExit("\n".join(d.summary for d in loaded.diagnostics))
    return loaded.clusters[0]


# --- playing the scenario into one fleet -----------------------------------------------------


@dataclass
class Tracked:
    """One instance at vast, its story, and when its failure (if any) began."""

    vast_id: int
    story: Story
    created_at: float
    enrolled_at: float | None = None
    failed_at: float | None = None  # the failure began (an idle one: its job ended)
    earliest: float | None = None  # the earliest end the default spec's window allows
    stall_cleared: bool = False
    until: float | None = None  # the stint ended: the instance was started again for new work
    stint: int = 0  # 0: the rental's own; n: the n-th start after a deliberate stop

    def in_job(self, now: float) -> bool:
        """Enrolled, not failed, job not over (short quiet gaps are part of the job)."""
        if self.enrolled_at is None or self.failed_at is not None:
            return False
        return now < self.enrolled_at + self.story.job

    def working(self, now: float) -> bool:
        """What its agent's utilisation sample says now."""
        if self.enrolled_at is None or not self.in_job(now):
            return False
        offset = now - self.enrolled_at
        return not any(a <= offset < b for a, b in self.story.gaps)


@dataclass
class Scenario:
    """Plays the seeded scenario into one fleet (fates on new rentals, failures when due,
    orphans, the demand curve) and remembers every instance for the accounting."""

    config: Config
    fleet: Fleet
    windows: Watchdogs  # the default spec's thresholds: the floor's windows
    pull_limit: float
    tracked: dict[int, Tracked] = field(default_factory=dict)  # each instance's current stint
    past: list[Tracked] = field(default_factory=list)  # stints that ended with a start
    rentals: int = 0
    due: list[tuple[float, int, str, int]] = field(default_factory=list)  # (at, seq, what, id)
    watching: set[int] = field(default_factory=set)  # stalls and failed start-ups in progress
    seq: int = 0

    def install(self) -> None:
        curve = demand_curve(self.config)
        self.fleet.signals.demand_at = lambda now: {(CLUSTER, NODE_TYPE): demand_at(curve, now)}
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
            _, _, what, ident = heapq.heappop(self.due)
            self._happen(what, ident, now)

    def _schedule(self, at: float, what: str, ident: int) -> None:
        self.seq += 1
        heapq.heappush(self.due, (at, self.seq, what, ident))

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
        self._begin(t, now)

    def _resumed(self, vast_id: int, now: float) -> None:
        """A worker started again after a deliberate stop: its stint ends, a new one begins
        with the work that brought it back."""
        t = self.tracked.get(vast_id)
        if t is None:
            return
        t.until = now
        self.past.append(t)
        stint = t.stint + 1
        fresh = Tracked(vast_id, resumed_story(self.config, vast_id, stint), now, stint=stint)
        self.tracked[vast_id] = fresh
        self._begin(fresh, now)

    def _begin(self, t: Tracked, now: float) -> None:
        """Its job starts (at enrollment, or at a resume): its failure or its job's end is
        scheduled."""
        vast_id = t.vast_id
        t.enrolled_at = now
        if t.story.fate in (Fate.DIES, Fate.NET_DROP):
            self._schedule(now + t.story.fail_after, t.story.fate.value, vast_id)
        elif now + t.story.job > self.config.horizon:
            # a job that would end in the drain goes on: no failure begins after the horizon
            t.story = dataclasses.replace(t.story, job=math.inf)
        else:
            self._schedule(now + t.story.job, Fate.IDLE.value, vast_id)

    def _new_rental(self, vast_id: int, now: float) -> None:
        """The next rank's fate. A stall's machine is made never to finish loading before the
        instance gets there (it was created this tick, so vast is still provisioning it)."""
        t = Tracked(vast_id, story(self.config, self.rentals), now)
        self.rentals += 1
        self.tracked[vast_id] = t
        if t.story.fate is Fate.STALL:
            self.fleet.sim.faults.never_boots(self.fleet.sim.instances[vast_id].machine.machine_id)
            t.failed_at = now
            t.earliest = now + min(self.pull_limit, self.windows.provision_deadline_seconds)
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
        if t.story.fate is Fate.STALL and inst.actual_status == "loading":
            machine = inst.machine
            self.fleet.sim.mutate(
                lambda now: self.fleet.sim.fleet.set_traits(machine, never_boots=False)
            )
            t.stall_cleared = True
            self.watching.discard(t.vast_id)
        if t.story.fate is Fate.BOOT and inst.first_running_at is not None:
            t.failed_at = inst.first_running_at
            t.earliest = inst.first_running_at + self.windows.enrollment_limit_seconds
            self.watching.discard(t.vast_id)

    def _happen(self, what: str, ident: int, now: float) -> None:
        if what == "orphan":
            self._orphan(ident, now)
            return
        t = self.tracked[ident]
        if ident not in self.fleet.sim.instances or t.failed_at is not None:
            return  # ended before its failure began
        if (
            what == Fate.IDLE.value
            and t.enrolled_at is not None
            and t.enrolled_at + t.story.job > now
        ):
            return  # a past stint's job end: this stint's job goes on
        if now > self.config.horizon:
            return  # too late to be fair to every policy: it stays healthy
        t.failed_at = now
        if what == Fate.IDLE.value and t.enrolled_at is not None:
            t.failed_at = t.enrolled_at + t.story.job  # the job ended then, between two steps
            t.earliest = t.failed_at + self.windows.idle_stop_after_seconds
            return
        if what == Fate.DIES.value:
            cut = Span(now)
            self.fleet.faults[ident] = dataclasses.replace(
                self.fleet.agents.fault(ident), head_unreachable=cut, vast_unreachable=cut
            )
        else:
            self.fleet.sim.faults.offline(ident)
        agent = self.fleet.agent(ident)
        last = agent.last_heartbeat_success if agent is not None else None
        t.earliest = max(
            now, (now if last is None else last) + self.windows.went_silent_after_seconds
        )

    def _orphan(self, k: int, now: float) -> None:
        """An instance with our label and no record, on one of the cheapest fitting offers."""
        f = self.fleet
        node_type = f.controller.specs[CLUSTER].node_types[NODE_TYPE]
        offers = [
            o
            for o in f.client.search_offers(offer_search(node_type))
            if unfit_reason(o, node_type) is None
        ]
        if not offers:
            return
        offer = offers[rng(self.config, "orphan", k).randrange(min(10, len(offers)))]
        label = label_for(CLUSTER, f.controller.journal.lineage, f"orphan{k}")
        created = f.client.create_instance(
            offer.id, CreateRequest(image=IMAGE, disk_gb=DISK_GB, label=label)
        )
        self.tracked[created.instance_id] = Tracked(
            created.instance_id,
            Story(Fate.ORPHAN, 0.0, 0.0, ()),
            now,
            failed_at=now,
            earliest=now + self.windows.orphan_grace_seconds,
        )


@dataclass
class TypedJournal(Journal):
    """The controller's journal, keeping the typed records instead of re-encoding the state.

    The real `Journal.save` encodes the whole state and the store redacts, encodes and decodes
    it again, on every change; the controller then goes on with the very records object it
    handed in (the real journal caches that object), so no decision ever reads what the round
    trip produced. Destroyed records are kept forever, so the round trip grows with every
    rental ever made and would dominate a long run. Skipping it changes no figure (`--real-store`
    runs the real one); the ledger is still written by the real `LedgerWriter`."""

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


@dataclass(frozen=True)
class Outcome:
    """One instance as the meter saw it: its failure (if any) and what followed."""

    fate: Fate  # the class it failed in; HEALTHY when it never failed
    vast_id: int
    failed_at: float | None
    ended_at: float | None  # first stop or destroy after the failure (or ever, if it never failed)
    wasted: float  # $ after the failure began, to the end of the run
    floor: float  # $ had it ended at the earliest moment its window allows
    worked: float  # busy hours delivered
    false_destroy: bool
    leaked: bool
    recorded: bool  # a live record of ours answers for it at the end

    @property
    def latency(self) -> float:
        if self.failed_at is None or self.ended_at is None:
            return math.inf
        return self.ended_at - self.failed_at


def cost(segments: Sequence[Segment], start: float, end: float) -> float:
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


def account(config: Config, scenario: Scenario) -> list[Outcome]:
    """Every tracked instance, from the meter, at the end of the run."""
    records = scenario.fleet.controller.records()
    live = {r.vast_id for r in records.instances.values() if r.live and r.vast_id is not None}
    tail = scenario.windows.idle_destroy_after_seconds - scenario.windows.idle_stop_after_seconds
    stints = [*scenario.past, *scenario.tracked.values()]
    return [
        _outcome(config, t, scenario.fleet.sim.meter.segments(t.vast_id), t.vast_id in live, tail)
        for t in sorted(stints, key=lambda t: (t.vast_id, t.stint))
    ]


def _outcome(
    config: Config, t: Tracked, segments: Sequence[Segment], recorded: bool, tail: float
) -> Outcome:
    stop = config.end if t.until is None else min(config.end, t.until)
    worked = _worked(t, segments, stop)
    if t.failed_at is None:
        first = ended_at(segments, t.created_at)
        false = first is not None and first <= stop and not _allowed_end(t, first)
        return Outcome(
            Fate.HEALTHY, t.vast_id, None, first, 0.0, 0.0, worked, false, False, recorded
        )
    end = ended_at(segments, t.failed_at)
    if end is not None and end > stop:
        end = None
    wasted = cost(segments, t.failed_at, stop)
    floor = min(wasted, _floor(t, segments, end, tail))
    fate = Fate.IDLE if t.story.fate in WORKING_FATES else t.story.fate
    return Outcome(
        fate, t.vast_id, t.failed_at, end, wasted, floor, worked, False, end is None, recorded
    )


def _allowed_end(t: Tracked, at: float) -> bool:
    """A machine that never failed may end only after its job (it booted and enrolled)."""
    return t.enrolled_at is not None and not t.in_job(at)


def _worked(t: Tracked, segments: Sequence[Segment], end: float) -> float:
    """Busy worker-hours: from enrollment to the job's end, failure, or the instance's end."""
    if t.enrolled_at is None:
        return 0.0
    stops = [t.enrolled_at + t.story.job, end]
    if t.failed_at is not None:
        stops.append(t.failed_at)
    gone = ended_at(segments, t.enrolled_at)
    if gone is not None:
        stops.append(gone)
    return max(0.0, min(stops) - t.enrolled_at) / H


def _floor(t: Tracked, segments: Sequence[Segment], end: float | None, tail: float) -> float:
    """Dollars from the failure to the earliest end its window allows; an idle worker is then
    stopped, and bills storage for `tail` seconds until its destroy timer."""
    assert t.failed_at is not None and t.earliest is not None
    until = t.earliest if end is None else min(t.earliest, end)
    floor = cost(segments, t.failed_at, until)
    if t.story.fate in WORKING_FATES:
        storage = min((s.rate for s in segments), default=0.0)
        floor += storage * tail / H
    return floor


# --- results ---------------------------------------------------------------------------------


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
        return _ratio_of(self.wasted, self.floor)


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    rentals: int
    classes: tuple[ClassRow, ...]
    false_destroys: int
    leaks: int
    unrecorded_leaks: int  # leaks no live record of ours answers for
    leak_dph: float
    worked_hours: float
    billed: float  # everything the meter billed in the run
    seconds: float  # wall time of the run: never part of a result comparison

    @property
    def wasted(self) -> float:
        return math.fsum(c.wasted for c in self.classes)

    @property
    def floor(self) -> float:
        return math.fsum(c.floor for c in self.classes)

    @property
    def ratio(self) -> float:
        return _ratio_of(self.wasted, self.floor)

    def dollars(self) -> tuple[float, ...]:
        """Every dollar figure (for the determinism check)."""
        figures = (self.billed, self.wasted, self.floor, self.leak_dph)
        return figures + tuple(x for c in self.classes for x in (c.wasted, c.floor))


def _ratio_of(wasted: float, floor: float) -> float:
    if floor > 0:
        return wasted / floor
    return 1.0 if wasted == 0 else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank; a failure that never ended (inf) is slower than any that did."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else math.nan


def class_row(fate: Fate, outcomes: Sequence[Outcome]) -> ClassRow:
    mine = [o for o in outcomes if o.fate is fate]
    latencies = [o.latency for o in mine]
    return ClassRow(
        fate,
        len(mine),
        sum(1 for o in mine if o.ended_at is not None),
        (percentile(latencies, 0.5), percentile(latencies, 0.95), percentile(latencies, 1.0)),
        math.fsum(o.wasted for o in mine),
        math.fsum(o.floor for o in mine),
    )


def summarise(
    policy: Policy, scenario: Scenario, outcomes: Sequence[Outcome], seconds: float
) -> PolicyResult:
    meter = scenario.fleet.sim.meter
    leaks = [o for o in outcomes if o.leaked]
    return PolicyResult(
        policy=policy.name,
        rentals=scenario.rentals,
        classes=tuple(class_row(fate, outcomes) for fate in CLASSES),
        false_destroys=sum(1 for o in outcomes if o.false_destroy),
        leaks=len(leaks),
        unrecorded_leaks=sum(1 for o in leaks if not o.recorded),
        leak_dph=math.fsum(meter.rate(o.vast_id) for o in leaks),
        worked_hours=math.fsum(o.worked for o in outcomes),
        billed=meter.total(at=scenario.config.end),
        seconds=seconds,
    )


# --- one run ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _temporary_files_in_memory() -> Iterator[None]:
    """The harness keeps its ledger in a temporary directory and fsyncs every line; on
    /dev/shm that costs no disk flush (and changes no figure)."""
    old = tempfile.tempdir
    if Path("/dev/shm").is_dir():
        tempfile.tempdir = "/dev/shm"
    try:
        yield
    finally:
        tempfile.tempdir = old


def run(config: Config, policy: Policy, *, real_store: bool = False) -> PolicyResult:
    """One policy through the whole scenario, on a fresh simulator and state."""
    started = time.perf_counter()
    defaults = spec_for(config, RAY_VAST)  # the floor's windows, whatever the policy
    with _temporary_files_in_memory(), fleet(spec_for(config, policy), market=market(config)) as f:
        if not real_store:
            j = f.controller.journal
            f.controller.use_journal(TypedJournal(j.store, j.ledger, j.snapshot))
        policy.apply(f.controller)
        scenario = Scenario(
            config,
            f,
            windows=defaults.watchdogs,
            pull_limit=float(defaults.node_types[NODE_TYPE].pull_limit_seconds),
        )
        scenario.install()
        f.run_until(config.end, step=config.step, each=scenario.step)
        outcomes = account(config, scenario)
        return summarise(policy, scenario, outcomes, time.perf_counter() - started)


# --- the table -------------------------------------------------------------------------------


def _minutes(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return "never" if math.isinf(seconds) else f"{seconds / 60:.1f}m"


def _times(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}x"


HEADER = (
    f"{'policy':<14} {'class':<9} {'n':>4} {'ended':>5} {'p50':>7} {'p95':>7} {'max':>7} "
    f"{'$ after':>9} {'$ floor':>8} {'ratio':>8}"
)


def table(results: Sequence[PolicyResult]) -> str:
    """One table: a line per policy (all classes), then a line per failure class."""
    lines = [HEADER, "-" * len(HEADER)]
    for r in results:
        failures = sum(c.failures for c in r.classes)
        ended = sum(c.ended for c in r.classes)
        lines.append(
            f"{r.policy:<14} {'ALL':<9} {failures:>4} {ended:>5} {'':>7} {'':>7} {'':>7} "
            f"{r.wasted:>9.2f} {r.floor:>8.2f} {_times(r.ratio):>8}   "
            f"false destroys {r.false_destroys}, leaks {r.leaks} "
            f"({r.unrecorded_leaks} unrecorded, ${r.leak_dph:.2f}/h), rentals {r.rentals}, "
            f"work {r.worked_hours:.0f} h, billed ${r.billed:.2f}"
        )
        lines.extend(
            f"{'':<14} {c.fate.value:<9} {c.failures:>4} {c.ended:>5} "
            f"{_minutes(c.latency[0]):>7} {_minutes(c.latency[1]):>7} "
            f"{_minutes(c.latency[2]):>7} {c.wasted:>9.2f} {c.floor:>8.2f} {_times(c.ratio):>8}"
            for c in r.classes
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[PolicyResult]:
    """Run the policies on the same scenario, print the table, return the results."""
    args = _parser().parse_args(argv)
    # the heads say each worker's report in their log; the ledger keeps it, the table reads that
    logging.getLogger("reconciler.head").addHandler(logging.NullHandler())
    config = dataclasses.replace(QUICK if args.quick else FULL, seed=args.seed)
    if args.hours is not None:
        config = dataclasses.replace(config, hours=args.hours)
    chosen = [p for p in POLICIES if not args.policy or p.name in args.policy]
    results = [run(config, p, real_store=args.real_store) for p in chosen]
    print(
        f"fleet: seed {config.seed}, failures for {config.hours:g} h then {config.drain_hours:g} h"
        f" of drain, demand {config.demand[0]}-{config.demand[1]} workers, {config.step:g} s "
        "steps. '$ after': billed after each failure began (to the end of the run); "
        "latency: failure -> first stop or destroy; ratio: '$ after' / floor (every failure "
        "ended at the earliest moment the default spec's window allows)"
    )
    print(table(results))
    print("wall: " + ", ".join(f"{r.policy} {r.seconds:.1f}s" for r in results))
    if not args.quick:
        # the two classes only the composed controller shows (ray-vast's engine; issue 12)
        print(composed.report())
    return results


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=FULL.seed)
    parser.add_argument("--quick", action="store_true", help="a tiny run (the smoke test's)")
    parser.add_argument("--hours", type=float, help="the period in which failures begin")
    parser.add_argument(
        "--policy", action="append", help="run only this policy (repeatable)", default=[]
    )
    parser.add_argument(
        "--real-store",
        action="store_true",
        help="save through the real state store (slow; the figures are the same)",
    )
    return parser


if __name__ == "__main__":
    main(sys.argv[1:])
