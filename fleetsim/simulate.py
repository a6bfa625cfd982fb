"""A what-if on virtual time: cluster specs, thresholds and budget against a failure mix.

`simulate(specs, config)` runs the whole engine as `ray-vast watch` runs it (`fleetsim.harness`:
the controller with its planner, nets, money chain, executor and ledger; one head per cluster;
the agent's state machine in every container; vastsim on a virtual clock), with the seeded
scenario of `fleetsim.scenario` played into it: Ray's demand a step curve per node type, the
fates of `fleetsim.mix` in every rental at the boundary, orphans. Then it accounts:

- dollars by cause, from the records and the ledger (`reconciler.model.cost`, what `ray-vast
  cost` reports), beside vastsim's meter (the truth it must match);
- per failure class, the dollars billed after each failure began, against the floor: what it
  would have cost had every failure been caught at the earliest moment the *default* windows
  allow (so that thresholds of your own show as a ratio above or below it), priced from the
  instance's own meter over that window (an instance that bills storage only while stalled or
  offline is floored at storage; an idle worker is floored at a stop `idle_stop_after` after
  its job ended, then storage until `idle_destroy_after`); and the detection latency (failure
  -> the instance's first stop or destroy, from the meter);
- false destroys (a machine stopped or ended while nothing was wrong with it: booting, or in its
  job), leaks (a failed or idle machine still billing in full at the end), the work delivered
  (busy worker-hours, so that a policy cannot look cheap by doing less).

Failures begin only in the first `hours`; then `drain_hours` with no demand and no new failure,
so every window elapses before the end. The market is, unless one is given, vastsim's shipped one
(its hosts' own failure traits cleared: the mix is the only failure) plus a seeded generated one.
`ray-vast simulate` runs this on the user's specs; the fleet benchmark (bench/fleet.py) runs it
on one spec per ending policy (`prepare` plugs the policy into the controller).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetsim.harness import START, Fleet, TypedJournal, fleet
from fleetsim.mix import CLASSES, Fate
from fleetsim.scenario import (
    Config,
    Episode,
    Scenario,
    Tracked,
    default_windows,
)
from reconciler.model import cost
from reconciler.model.codec import encode
from reconciler.model.records import Intent, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.state import simclock
from reconciler.state.ledger import read_ledger
from reconciler.watch.controller import Controller
from vastsim import Market
from vastsim.billing import Segment
from vastsim.generate import generate_machines
from vastsim.market import STANDARD_IMAGES, Traits

__all__ = [
    "ClassRow",
    "ClusterRow",
    "Config",
    "Result",
    "Scenario",
    "default_windows",
    "market",
    "percentile",
    "ratio_of",
    "simulate",
]

H = 3600.0
GENERATED_MACHINES = 600


def market(config: Config) -> Market:
    """vastsim's shipped market without its hosts' failure traits (the mix is the only failure),
    and a seeded generated one beside it, for breadth."""
    shipped = Market.default()
    machines = [dataclasses.replace(m, traits=Traits()) for m in shipped.machines.values()]
    machines += generate_machines(config.seed, GENERATED_MACHINES)
    return Market(machines, images={**STANDARD_IMAGES, **shipped.images})


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
    unrecorded_leaks: int  # leaks no live record of ours answers for
    leak_dph: float
    kept_at_minimum: int  # idle workers min_workers keeps up (not leaks)
    worked_hours: float
    billed: float  # everything vastsim's meter billed in the run (ours or not)
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

    @property
    def ratio(self) -> float:
        return ratio_of(self.wasted, self.floor)

    def figures(self) -> tuple[float, ...]:
        """Every dollar figure (for a determinism check: the same seed gives the same)."""
        totals = (self.billed, self.dollars, self.wasted, self.floor, self.leak_dph)
        return totals + tuple(x for c in self.classes for x in (c.wasted, c.floor))


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
    live = {r.vast_id for r in records.instances.values() if r.live and r.vast_id is not None}
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
        sum(1 for v in leaks if v not in live),
        math.fsum(meter.rate(v) for v in leaks),
        len(kept),
        worked / H,
        meter.total(at=end),
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
        stops = [until, end, *(at for at in failures if at >= start)]
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


_QUIET = logging.NullHandler()


def simulate(
    specs: Sequence[ClusterSpec],
    config: Config,
    *,
    offers: Market | None = None,
    prepare: Callable[[Controller], None] | None = None,
    real_store: bool = False,
    state_dir: Path | None = None,
) -> Result:
    """The specs through the whole scenario, on a fresh simulator and state. `offers`: vast's
    market (default: `market(config)`); `prepare`: called with the controller before its first
    tick (the fleet benchmark plugs a policy in); `real_store`: save through the real state
    store (slow; the figures are the same); `state_dir`: keep the run's state file and ledger
    there (for `ray-vast cost`, `ledger`, `state` on it)."""
    started = time.perf_counter()
    # the heads say each worker's report in their log; the ledger keeps it
    logging.getLogger("reconciler.head").addHandler(_QUIET)
    windows, pull_limit = default_windows()
    with (
        _temporary_files_in_memory(),
        fleet(
            list(specs),
            market=market(config) if offers is None else offers,
            state_dir=state_dir,
            typed=not real_store,
        ) as f,
    ):
        typed = f.controller.journal if isinstance(f.controller.journal, TypedJournal) else None
        if prepare is not None:
            prepare(f.controller)
        scenario = Scenario(config, f, windows=windows, pull_limit=float(pull_limit))
        scenario.install()
        f.run_until(config.end, step=config.step, each=scenario.step)
        result = account(scenario, time.perf_counter() - started)
        if state_dir is not None and typed is not None:  # it saved nothing: the state as it ends
            typed.store.write(encode(typed.records()), based_on=typed.snapshot)
        if state_dir is not None:  # `cost` on it prices to the run's end, not to today
            simclock.write(state_dir, simclock.SimulatedClock(START, f.clock.now()))
        return result
