"""The watch controller: one tick runs every watchdog that is due, on one shared listing.

It holds the records (through the journal) behind one lock, so the head's enrollment and heartbeat
handlers and the nets see and change the same state. A tick is: reconcile when due (one listing,
the planner, the one applier), then each due net on the records, their detections written to the
ledger and routed through the one table into a plan for the same applier. The clock is injected;
the loop that sleeps between ticks is `run`.

The lock is held only to decide: a listing, an offer search and a read of Ray are made without
it, the planner and the nets run under it on the records as they are then and their plan's
bookkeeping is saved in the same hold, and the applier makes the calls to vast after it is
released. An enrollment or a heartbeat waits for a decision (milliseconds), never for vast.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from reconciler.applying.applier import Applier
from reconciler.applying.executor import ApplyResult
from reconciler.applying.journal import Journal, RecordsLock
from reconciler.applying.launch import Launcher
from reconciler.applying.observe import observe_and_plan
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head import tokens
from reconciler.model import cost, stopping
from reconciler.model.observation import NodeKey
from reconciler.model.plan import Action, ActionKind, Plan
from reconciler.model.records import (
    Alert,
    ClusterRecord,
    InstanceRecord,
    Phase,
    Records,
    Role,
    traffic_again,
)
from reconciler.model.spec import ClusterSpec
from reconciler.nets import idle, lost, never_reported, pools, went_silent
from reconciler.nets.base import NetResult
from reconciler.nets.detection import Detection
from reconciler.planning import deadlines, guards, retention, revocation, scaling
from reconciler.planning.react import react
from reconciler.state.ledger import LedgerKind
from reconciler.watch.agenda import DeadlineReadings, Reading
from reconciler.watch.schedule import Schedule

log = logging.getLogger("ray_vast")
T = TypeVar("T")


class Signals(Protocol):
    """What the controller learns from Ray and the agents, read once per tick. Anything that
    could not be read is "unknown" (None), never "no demand" or "idle"."""

    def demand(
        self, specs: Mapping[str, ClusterSpec], records: Records
    ) -> Mapping[NodeKey, int] | None: ...

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]: ...

    def probes(self, records: Records) -> Mapping[str, bool]: ...

    def work(self, records: Records) -> Mapping[str, bool] | None:
        """Per record of the clusters this reader serves: whether Ray reports work on its node
        (leased resources, actors, placement-group bundles; False when Ray has no live node of
        it); None when Ray could not be read. Records it does not name keep their pin."""
        ...

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        """Before the money chain ends idle machines: ask Ray to drain their nodes for idle
        termination (as autoscaler v2 does, with a deadline); per record, whether Ray accepted
        (a rejection means Ray has work there: busy). None: Ray was not asked (not read)."""
        ...

    def infeasible(self) -> Mapping[str, tuple[str, ...]]:
        """By cluster: the demand of the last `demand` reading that fits no node type, in Ray's
        words ("{GPU: 1} fits no node type of local-sim"); it rents nothing."""
        ...

    def unread(self) -> Collection[str]:
        """The clusters whose Ray head the last `demand` reading could not read (a Ray head that
        is down: workers could not join it, so nothing is rented for it after a while)."""
        ...


class AgentSignals:
    """Signals from the agents' own heartbeat samples only (no Ray reader attached)."""

    def __init__(self, freshness: float = 90.0) -> None:
        self.freshness = freshness

    def demand(self, specs: Mapping[str, ClusterSpec], records: Records) -> Mapping[NodeKey, int]:
        return {}

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        return {
            r.id: (r.sample_busy if r.sample_at and now - r.sample_at <= self.freshness else None)
            for r in records.instances.values()
        }

    def probes(self, records: Records) -> Mapping[str, bool]:
        return {}

    def work(self, records: Records) -> Mapping[str, bool] | None:
        return None

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        return None

    def infeasible(self) -> Mapping[str, tuple[str, ...]]:
        return {}

    def unread(self) -> Collection[str]:
        return ()


@dataclass
class TickReport:
    at: float
    jobs: dict[str, list[str]] = field(default_factory=dict)
    detections: list[Detection] = field(default_factory=list)
    results: list[ApplyResult] = field(default_factory=list)
    records: Records | None = None  # as the tick left them


# Jobs that run only with a complete listing: recorded as run only when the listing was had.
LISTING_JOBS = frozenset({"reconcile", "orphan_sweep"})
# Clusters no longer declared are pruned on this cadence (the default reconcile cadence).
PRUNE_KEY = "\x00pruning"
PRUNE_SECONDS = 60.0
# A listing the deadlines ask for comes no sooner than this after one that failed.
LISTING_RETRY_SECONDS = 10.0

# How long Ray has to drain an idle node before the money chain's end goes ahead anyway.
IDLE_DRAIN_DEADLINE_SECONDS = 60.0

# A cluster whose part of a tick raised is retried after this, doubling to the cap (temporary
# errors, as kopf backs off a handler that failed).
FAILURE_BACKOFF_SECONDS = 5.0
FAILURE_BACKOFF_MAX_SECONDS = 300.0


@dataclass
class Failing:
    """A cluster whose part of a tick raised: how many times in a row, and when to retry."""

    attempts: int
    retry_at: float
    error: str


# The money chain's acting nets: the scanner's clearing runs before them in every pass.
ACTING_ON_QUIET = frozenset({"auto_stop", "auto_destroy"})
POOL_JOBS = frozenset({"pool_idle_release", "queue_wait", "no_consumer", "stuck_dispatch"})

MachineNet = Callable[..., NetResult]
MACHINE_NETS: Mapping[str, MachineNet] = {
    "boot_failure": never_reported.run,
    "went_silent": went_silent.run,
    "lost": lost.run,
    "auto_stop": idle.auto_stop,
    "auto_destroy": idle.auto_destroy,
}


@dataclass
class Controller:
    specs: dict[str, ClusterSpec]
    journal: Journal
    provider: Provider
    launcher: Launcher
    clock: Clock
    signals: Signals = field(default_factory=AgentSignals)
    progress: Callable[[str], None] = lambda line: None
    schedules: dict[str, Schedule] = field(default_factory=dict)
    detections_by_net: dict[str, int] = field(default_factory=dict)
    # The machine nets and the idle scanner, by job name; the benchmarks swap in other policies.
    machine_nets: Mapping[str, MachineNet] = field(default_factory=lambda: dict(MACHINE_NETS))
    idle_scanner: bool = True
    # When each cluster was last listed completely, and the clusters to list at the next tick
    # because a machine of theirs just ended (its slot may need a replacement at once).
    listed_at: dict[str, float] = field(default_factory=dict)
    _wake: set[str] = field(default_factory=set)
    # When a cluster's listing last failed: an early listing waits a little after a failure
    # (vast's outage must not turn the controller's deadlines into a request loop).
    _failed_at: dict[str, float] = field(default_factory=dict)
    # The specs are a whole directory (not one file): a cluster it stops declaring is pruned.
    prune: bool = True
    # Policy destroys of most of a cluster go ahead unattended (`watch --allow-mass-destroy`).
    allow_mass_destroy: bool = False
    # Clusters whose part of a tick raised, by name: they sit out their ticks until `retry_at`;
    # and the shared steps (signal reads, prunes) that are failing now (ledgered once each).
    failing: dict[str, Failing] = field(default_factory=dict)
    _shared_failing: set[str] = field(default_factory=set)
    _failed_now: set[str] = field(default_factory=set)  # the clusters that failed this tick
    _infeasible_said: set[tuple[str, str]] = field(default_factory=set)
    # Since when each cluster's Ray head could not be read (DESIGN.md 11: after 60 s nothing is
    # rented for it, and a person is alerted).
    _ray_unread_since: dict[str, float] = field(default_factory=dict)
    # How often Ray's demand is read between reconciles (the runner sets it when a Ray reader is
    # attached); None: only at the reconcile.
    demand_check_seconds: float | None = None
    _demand_checked_at: float = float("-inf")
    # A stop was asked for (the first SIGINT/SIGTERM): a plan stops after the call in flight.
    stop_requested: Callable[[], bool] = lambda: False
    applier: Applier = field(init=False)
    _readings: DeadlineReadings = field(default_factory=DeadlineReadings)

    def __post_init__(self) -> None:
        self.applier = Applier(
            provider=self.provider,
            books=self.journal,
            now=self.clock.now,
            specs=lambda: self.specs,
            launcher_of=lambda: self.launcher,
            progress=self._say,
            on_result=self._ended,
            stop_requested=self._stopping,
        )
        self.set_specs(self.specs)

    def use_journal(self, journal: Journal) -> None:
        """Keep the records in another journal from now on (a benchmark's faster one)."""
        self.journal = journal
        self.applier.books = journal

    @property
    def lock(self) -> RecordsLock:
        """The records lock (the journal's): held to decide, never across a call to vast."""
        return self.journal.lock

    def set_specs(self, specs: Mapping[str, ClusterSpec], *, revision: str | None = None) -> None:
        """New desired state (a spec file changed): reconcile the changed clusters at the next
        tick, not at the next cadence; schedules keep their other clocks."""
        with self.lock:
            old = self.specs if self.schedules else {}
            self.specs = dict(specs)
            for name, spec in self.specs.items():
                if name not in self.schedules:
                    self.schedules[name] = Schedule.of(spec.cadences)
                    continue
                self.schedules[name].retune(spec.cadences)
                if name not in old or old[name].digest != spec.digest:
                    self.schedules[name].last.pop("reconcile", None)
            for gone in set(self.schedules) - set(self.specs):
                del self.schedules[gone]
            self._record_revision(revision)

    def _record_revision(self, revision: str | None) -> None:
        """Which spec (digest, Git revision) each cluster is being reconciled against."""
        records = self.journal.records()
        clusters = {
            name: ClusterRecord(name, spec.digest, revision) for name, spec in self.specs.items()
        }
        if dict(records.clusters) != clusters:
            self.journal.save(replace(records, clusters=clusters))

    # --- shared state --------------------------------------------------------------------------

    def records(self) -> Records:
        with self.lock:
            return self.journal.records()

    def mutate(self, change: Callable[[Records, float], Records]) -> Records:
        """Change the records under the lock and save them (the head's handlers use this)."""
        with self.lock:
            updated = change(self.journal.records(), self.clock.now())
            self.journal.save(updated)
            return updated

    def _forget_ended(self) -> None:
        """Records of machines ended long ago leave the state (planning/retention.py); the bill of
        each goes to the ledger first, so `ray-vast cost` still prices it."""
        with self.lock:
            before = self.journal.records()
            after = retention.prune(before, self.clock.now())
            if after is before:
                return
            for rid, record in sorted(before.instances.items()):
                life = cost.life_of(record) if rid not in after.instances else None
                if life is None:
                    continue
                dollars = sum(
                    c.dollars for c in cost.charges([life], since=None, until=life.end or 0.0)
                )
                self.journal.log(
                    record.cluster,
                    LedgerKind.REPORT,
                    cost.BILL_CLASS,
                    f"instance {record.vast_id} ended a day ago: its bill (${dollars:.4f}) leaves "
                    "the state and is kept here",
                    record=rid,
                    instance=record.vast_id,
                    data=cost.bill_entry(life),
                )
            self.journal.save(after)

    def execute(self, plan: Plan) -> ApplyResult:
        """Save a plan's bookkeeping and carry it out with the one applier (outside the lock).
        Alerts are said in the log as well as kept for `status`."""
        self._say_alerts(plan)
        self.applier.commit(plan)
        return self.applier.carry_out(plan.actions)

    def _stopping(self) -> bool:
        return self.stop_requested()  # looked up at each call: the runner sets it after building

    def _say(self, line: str) -> None:
        self.progress(line)  # looked up at each call: the runner may set `progress` later

    def _say_alerts(self, plan: Plan) -> None:
        for note in plan.notes:
            if note.startswith("ALERT"):
                self.progress(note)

    def _ended(self, result: ApplyResult) -> None:
        """A machine of a cluster ended (whoever's plan it was): list the cluster again at once,
        its slot may need a replacement."""
        self._wake |= {
            a.cluster
            for a in result.done
            if a.kind is ActionKind.DESTROY and a.cluster in self.specs
        }

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """Every due job of every cluster. A cluster whose part raises (its listing and plan, its
        nets) is logged with the traceback, ledgered once and retried with backoff; the other
        clusters go on in the same tick. A signal or prune that raises counts as unknown."""
        now = self.clock.now()
        report = TickReport(now)
        self._failed_now = set()
        self._check_demand(now)
        due: dict[str, list[str]] = {}
        for name, schedule in self.schedules.items():
            failing = self.failing.get(name)
            if failing is not None and now < failing.retry_at:
                continue  # sits out until its retry; its jobs stay due
            try:
                due[name] = self._due(name, schedule, now)
            except Exception as exc:
                self._cluster_failed(name, "schedule", exc, now)
        report.jobs = due
        ran: dict[str, list[str]] = {
            name: [j for j in jobs if j not in LISTING_JOBS] for name, jobs in due.items()
        }
        if any("reconcile" in jobs for jobs in due.values()) or self._pruning_due(now):
            self._shared("token_prune", lambda: self.mutate(tokens.prune), None)
            self._shared("retention_prune", self._forget_ended, None)
            listed = self._reconcile_contained(now, due, report)
            for name, jobs in listed.items():
                ran.setdefault(name, []).extend(jobs)
            for name, jobs in due.items():
                missed = [j for j in jobs if j in LISTING_JOBS and j not in listed.get(name, [])]
                if missed and name in self.schedules and name not in self._failed_now:
                    self.schedules[name].retry(missed, now, LISTING_RETRY_SECONDS)
        self._shared("ray_work", lambda: self._update_pins(now), None)
        self._run_nets(now, {n: j for n, j in due.items() if n not in self._failed_now}, report)
        self._shared("revocation", lambda: self.mutate(revocation.revoke_ended), None)
        for name, jobs in ran.items():
            if name in self.schedules and name not in self._failed_now:
                self.schedules[name].ran(jobs, now)
        for name in due:
            if name in self.failing and name not in self._failed_now:
                self._recovered(name, now)
        report.records = self.journal.records()
        return report

    def _due(self, name: str, schedule: Schedule, now: float) -> list[str]:
        jobs = schedule.due(now)
        if name not in self.specs:
            return jobs
        # The orphan sweep runs on a reconcile's listing: when it is due, so is the listing (a
        # sweep left waiting for the reconcile kept `next_wakeup` at 0: a tick every 50 ms).
        listing = self._listing_due(name, now) or "orphan_sweep" in jobs
        if listing and "reconcile" not in jobs:
            jobs.append("reconcile")
        for job, at in self._net_deadlines(name).items():
            if at <= now and job not in jobs:
                jobs.append(job)
        return jobs

    # --- containment ---------------------------------------------------------------------------

    def _cluster_failed(self, name: str, part: str, exc: BaseException, now: float) -> None:
        """One cluster's part of the tick raised: it sits out its ticks until a retry that backs
        off (5 s doubling to 5 min). The ledger has one line for the whole run of failures."""
        self._failed_now.add(name)
        previous = self.failing.get(name)
        attempts = previous.attempts + 1 if previous else 1
        delay = min(FAILURE_BACKOFF_SECONDS * 2 ** (attempts - 1), FAILURE_BACKOFF_MAX_SECONDS)
        error = f"{type(exc).__name__}: {exc}"
        self.failing[name] = Failing(attempts, now + delay, error)
        if previous is None or previous.error != error:
            log.error(
                "%s: %s failed (%s); retried in %.0f s",
                name,
                part,
                error,
                delay,
                exc_info=exc,
                extra={"cluster": name, "cls": "tick_failed"},
            )
        else:
            log.warning(
                "%s: %s failed again, %d times in a row (%s); retried in %.0f s",
                name,
                part,
                attempts,
                error,
                delay,
                extra={"cluster": name, "cls": "tick_failed"},
            )
        if previous is None:
            self.journal.log(
                name,
                LedgerKind.NOTE,
                "tick_failed",
                f"{part} failed: {error}; retried with backoff",
                data={"part": part, "error_type": type(exc).__name__, "error": str(exc)},
            )

    def _recovered(self, name: str, now: float) -> None:
        failing = self.failing.pop(name)
        log.info("%s: ticks again after %d failure(s)", name, failing.attempts)
        self.journal.log(
            name,
            LedgerKind.NOTE,
            "tick_recovered",
            f"ticks again after {failing.attempts} failed attempt(s) ({failing.error})",
            data={"attempts": failing.attempts},
        )

    def _shared(self, part: str, step: Callable[[], T], unknown: T) -> T:
        """A step no one cluster owns (a signal read, a prune): when it raises, its answer is
        unknown for this tick; logged with the traceback and ledgered once per run of failures
        (under every cluster), tried again at the next tick."""
        try:
            value = step()
        except Exception as exc:
            self._shared_failed(part, exc)
            return unknown
        if part in self._shared_failing:
            self._shared_failing.discard(part)
            log.info("%s works again", part)
        return value

    def _shared_failed(self, part: str, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"
        if part in self._shared_failing:
            log.warning("%s failed again (%s); unknown this tick", part, error)
            return
        self._shared_failing.add(part)
        log.error("%s failed (%s); unknown this tick", part, error, exc_info=exc)
        for name in self.specs:
            self.journal.log(
                name,
                LedgerKind.NOTE,
                "tick_failed",
                f"{part} failed: {error}; unknown until it works again",
                data={"part": part, "error_type": type(exc).__name__, "error": str(exc)},
            )

    def _reconcile_contained(
        self, now: float, due: Mapping[str, list[str]], report: TickReport
    ) -> dict[str, list[str]]:
        """One listing serves every due cluster. When that shared pass raises, each cluster is
        listed and planned on its own (a plan's scope is its clusters: planning one leaves the
        others alone), so only the cluster whose part raises is held back; what the shared pass
        already carried out is in the records and in vast's next listing."""
        names = [n for n, jobs in due.items() if "reconcile" in jobs]
        before = dict(self.listed_at)
        wake = set(self._wake)
        try:
            return self._reconcile(now, due, report)
        except Exception as exc:
            if len(names) <= 1:
                self._restore_listing(names, before, wake)
                for name in names:
                    self._cluster_failed(name, "reconcile", exc, now)
                if not names:  # pruning alone
                    self._shared_failed("prune", exc)
                return {}
            log.warning(
                "one listing for %s failed (%s: %s); each cluster is listed on its own",
                ", ".join(names),
                type(exc).__name__,
                exc,
            )
        listed: dict[str, list[str]] = {}
        for name in names:
            before = dict(self.listed_at)
            wake = set(self._wake)
            try:
                listed.update(self._reconcile(now, {name: due[name]}, report))
            except Exception as exc:
                self._restore_listing([name], before, wake)
                self._cluster_failed(name, "reconcile", exc, now)
        return listed

    def _restore_listing(
        self, names: Sequence[str], listed_at: Mapping[str, float], wake: set[str]
    ) -> None:
        """A reconcile that raised did not list its clusters: their deadlines stay to be met."""
        for name in names:
            if name in listed_at:
                self.listed_at[name] = listed_at[name]
            else:
                self.listed_at.pop(name, None)
            if name in wake:
                self._wake.add(name)

    def _check_demand(self, now: float) -> None:
        """Ray's demand, read cheaply (Ray's GCS only, no call to vast) every few seconds when a
        Ray reader is attached: a node type that needs more workers than are there or coming
        lists and plans its cluster at once, not at the next reconcile (Ray's own autoscaler
        loop runs every 5 s)."""
        every = self.demand_check_seconds
        if every is None or now - self._demand_checked_at < every:
            return
        self._demand_checked_at = now
        seen = self.journal.records()
        wanted = self._shared("ray_demand", lambda: self.signals.demand(self.specs, seen), None)
        if wanted is not None:
            self._say_infeasible(now)
        for (cluster, node_type), count in (wanted or {}).items():
            if cluster in self.specs and cluster not in self._wake:
                have = scaling.capacity(seen.instances, seen.requests, cluster, node_type)
                limit = self.specs[cluster].node_types.get(node_type)
                if limit is not None and have < min(count, limit.max_workers):
                    log.info(
                        "%s/%s: Ray wants %d, %d there or coming", cluster, node_type, count, have
                    )
                    self._wake.add(cluster)

    def next_wakeup(self, now: float) -> float:
        """Seconds until the next tick has work: the next job of any cadence, or the earliest
        deadline a record holds (a limit fires within seconds of its threshold); a cluster that
        failed waits for its retry."""
        with self.lock:
            waits: list[float] = []
            for name, schedule in self.schedules.items():
                try:
                    mine = self._wakeups(name, schedule, now)
                except Exception:
                    mine = [FAILURE_BACKOFF_SECONDS]  # the tick says why
                failing = self.failing.get(name)
                if failing is not None:
                    mine = [max(w, failing.retry_at - now) for w in mine]
                waits += mine
            if self.demand_check_seconds is not None:
                waits.append(max(0.0, self._demand_checked_at + self.demand_check_seconds - now))
            return min(waits) if waits else 30.0

    def _wakeups(self, name: str, schedule: Schedule, now: float) -> list[float]:
        waits = [schedule.next_due(now)]
        spec = self.specs.get(name)
        if spec is None:
            return waits
        at = deadlines.first_after(
            self._reading(name).listing, self.listed_at.get(name, float("-inf"))
        )
        if name in self._wake:
            at = now
        if at is not None:
            waits.append(max(0.0, at - now, self._retry_at(name) - now))
        waits += [max(0.0, at - now) for at in self._net_deadlines(name).values()]
        return waits

    def _net_deadlines(self, name: str) -> dict[str, float]:
        """The machine nets' thresholds that a record of `name` reaches after the net last ran."""
        schedule = self.schedules.get(name)
        if schedule is None:
            return {}
        found = self._reading(name).nets
        return {
            job: at
            for job, at in found.items()
            if job in self.machine_nets and at > schedule.last.get(job, float("-inf"))
        }

    def _retry_at(self, name: str) -> float:
        return self._failed_at.get(name, float("-inf")) + LISTING_RETRY_SECONDS

    def _listing_due(self, name: str, now: float) -> bool:
        """A record's deadline has come (or a machine just ended): list now, not at the cadence
        (but not again within seconds of a listing that failed)."""
        if now < self._retry_at(name):
            return False
        if name in self._wake:
            return True
        at = deadlines.first_after(
            self._reading(name).listing, self.listed_at.get(name, float("-inf"))
        )
        return at is not None and at <= now

    def _reading(self, name: str) -> Reading:
        """`name`'s deadlines in the current records, read once per version of them."""
        return self._readings.of(name, self.journal.records(), self.specs[name])

    def _pruning_due(self, now: float) -> bool:
        """Records of a cluster no spec declares any more are pruned on the default reconcile
        cadence even when no declared cluster is due (or none is left)."""
        if not self.prune or now - self.listed_at.get(PRUNE_KEY, float("-inf")) < PRUNE_SECONDS:
            return False
        lineage = self.journal.lineage
        return any(
            r.live and r.managed_by == lineage and r.cluster not in self.specs
            for r in self.journal.records().instances.values()
        )

    def _reconcile(
        self, now: float, due: Mapping[str, list[str]], report: TickReport
    ) -> dict[str, list[str]]:
        """List and plan the due clusters; the jobs that really ran, by cluster (a failed listing
        runs none: the reconcile and the sweep stay due)."""
        specs = [s for name, s in self.specs.items() if "reconcile" in due.get(name, [])]
        sweep = any("orphan_sweep" in due.get(s.name, []) for s in specs)
        seen = self.journal.records()
        demand = self._shared("ray_demand", lambda: self.signals.demand(self.specs, seen), None)
        if demand is not None:
            self._say_infeasible(now)
        unread = self._note_unread(now)
        held: list[tuple[str, str]] = []

        def settle(plan_on: Callable[[Records], Plan]) -> Plan:
            """Under the lock: the final plan on the records as they are now, the mass destroys
            it holds back, its bookkeeping saved (the applier's calls come after the lock)."""
            with self.lock:
                plan = plan_on(self.journal.records())
                if plan.errored:
                    return plan
                if not self.allow_mass_destroy:
                    plan, found = guards.hold_mass_destroys(plan, self.journal.records())
                    held.extend(found)
                self._say_alerts(plan)
                self.applier.commit(plan)
                return plan

        plan = observe_and_plan(
            self.provider,
            specs,
            self.journal.records(),
            lineage=self.journal.lineage,
            serial=self.journal.serial,
            now=now,
            demand=demand or {},
            ray_unread_since=unread,
            sweep_orphans=sweep,
            declared=set(self.specs) if self.prune else None,
            settle=settle,
        )
        if plan.errored:
            for error in plan.errors:
                for spec in specs:
                    self.journal.log(spec.name, LedgerKind.NOTE, "listing_unknown", error)
            self._failed_at.update({spec.name: now for spec in specs})
            return {}
        for spec in specs:
            self.listed_at[spec.name] = now
            self._wake.discard(spec.name)
        self.listed_at[PRUNE_KEY] = now
        for cluster, why in held:  # after the plan's records are saved, so they keep it
            self.raise_alert(cluster, "mass_destroy_refused", why, now=now)
        report.results.append(self.applier.carry_out(plan.actions))
        return {s.name: ["reconcile", *(["orphan_sweep"] if sweep else [])] for s in specs}

    def _note_unread(self, now: float) -> dict[str, float]:
        """Since when each cluster's Ray head has not been readable, as of the last reading."""
        nobody: Collection[str] = ()
        unread = set(self._shared("ray_unread", self.signals.unread, nobody))
        for cluster in list(self._ray_unread_since):
            if cluster not in unread:
                del self._ray_unread_since[cluster]
        for cluster in unread:
            self._ray_unread_since.setdefault(cluster, now)
        return dict(self._ray_unread_since)

    def _say_infeasible(self, now: float) -> None:
        """Demand that fits no node type rents nothing; each shape is said once (ledger, log, an
        alert in `status`) while Ray keeps asking for it, and again if it comes back later."""
        nothing: Mapping[str, tuple[str, ...]] = {}
        asked = self._shared("ray_infeasible", self.signals.infeasible, nothing)
        current = {(cluster, words) for cluster, said in asked.items() for words in said}
        for cluster, words in sorted(current - self._infeasible_said):
            if cluster in self.specs:
                self.raise_alert(
                    cluster, "infeasible_demand", words, now=now, record=None, key=words
                )
        self._infeasible_said = current

    def raise_alert(
        self,
        cluster: str,
        cls: str,
        message: str,
        *,
        now: float,
        record: str | None = None,
        key: str | None = None,
    ) -> None:
        """An alert for a person: in the records (`status`), the ledger and the log; the same
        alert (cluster, class, record, and `key`: the message, for alerts told apart by it) is
        not raised again within an hour."""
        with self.lock:
            records = self.journal.records()
            recent = any(
                a.cluster == cluster
                and a.cls == cls
                and a.record == record
                and (key is None or a.message == key)
                and now - a.at < 3600
                for a in records.alerts
            )
            if recent:
                return
            alert = Alert(now, cluster, cls, message, record)
            self.journal.save(replace(records, alerts=(*records.alerts, alert)))
            self.journal.log(cluster, LedgerKind.DETECTION, cls, message, record=record)
            self.progress(f"ALERT {cluster}: {cls}: {message}")

    def _update_pins(self, now: float) -> None:
        """Reaper gate 3 from Ray: a machine is pinned while Ray reports work on its node. When
        Ray cannot be read the last known pins stay (unknown is never "no work")."""
        work = self.signals.work(self.journal.records())
        if work is None:
            return

        def pin(records: Records, _now: float) -> Records:
            # only the records Ray spoke for (a reader serves its own cluster's head)
            changed = {
                r.id: replace(r, pinned=work[r.id])
                for r in records.instances.values()
                if r.live and r.id in work and r.pinned != work[r.id]
            }
            if not changed:
                return records
            return replace(records, instances={**records.instances, **changed})

        self.mutate(pin)

    def _run_nets(self, now: float, due: Mapping[str, list[str]], report: TickReport) -> None:
        """Each cluster's due nets on the records, then one plan for all they found. What Ray
        says is read first, without the lock; the nets and the plan run under it on the records
        as they are then, and the plan's calls are made after it. A cluster whose nets raise is
        held back; when the shared plan raises, each cluster's findings are planned on their
        own."""
        seen = self.journal.records()
        probes: Mapping[str, bool] = self._shared(
            "ray_probes", lambda: self.signals.probes(seen), {}
        )
        probed = _with_probes(seen, probes, now)
        busy: Mapping[str, bool | None] = self._shared(
            "ray_busy", lambda: self.signals.busy(probed, now), {}
        )
        demands = {
            cluster: self._demand_of(cluster)
            for cluster, jobs in due.items()
            if any(j in POOL_JOBS for j in jobs) and cluster in self.specs
        }
        decided: list[tuple[_NetFindings, Records, Plan]] = []
        with self.lock:
            records = _with_probes(self.journal.records(), probes, now)
            parts: dict[str, _NetFindings] = {}
            for cluster, jobs in due.items():
                try:
                    parts[cluster] = self._cluster_nets(
                        cluster, jobs, records, now, busy=busy, demand=demands.get(cluster)
                    )
                except Exception as exc:
                    self._cluster_failed(cluster, "nets", exc, now)
            merged = _NetFindings.merge(parts.values())
            if merged.empty:
                return
            try:
                decided.append((merged, records, self._decide(merged, records, now)))
            except Exception as exc:
                if len(parts) <= 1:
                    for cluster in parts:
                        self._cluster_failed(cluster, "nets", exc, now)
                    return
                log.warning(
                    "one plan for the nets' findings failed (%s: %s); each cluster on its own",
                    type(exc).__name__,
                    exc,
                )
                for cluster, part in parts.items():
                    if part.empty:
                        continue
                    try:
                        current = self.journal.records()
                        decided.append((part, current, self._decide(part, current, now)))
                    except Exception as exc:
                        self._cluster_failed(cluster, "nets", exc, now)
        for findings, before, plan in decided:
            self._act_on(findings, before, plan, report)

    def _demand_of(self, cluster: str) -> Mapping[NodeKey, int] | None:
        specs = {cluster: self.specs[cluster]}
        seen = self.journal.records()
        return self._shared(
            f"ray_demand of {cluster}", lambda: self.signals.demand(specs, seen), None
        )

    def _cluster_nets(
        self,
        cluster: str,
        jobs: list[str],
        records: Records,
        now: float,
        *,
        busy: Mapping[str, bool | None],
        demand: Mapping[NodeKey, int] | None,
    ) -> _NetFindings:
        lineage = self.journal.lineage
        out = _NetFindings()
        specs = {cluster: self.specs[cluster]}
        mine = [r for r in records.instances.values() if r.cluster == cluster]
        if "idle_scan" in jobs and self.idle_scanner:
            self._take(
                idle.scan(mine, specs, busy=busy, lineage=lineage, now=now),
                "idle_scan",
                out.instances,
                out.found,
            )
        elif self.idle_scanner and ACTING_ON_QUIET & set(jobs):
            # the traffic this pass read clears the timers before anything acts on them
            self._take(idle.clear(mine, busy=busy, now=now), "idle_scan", out.instances, out.found)
        for job, net in self.machine_nets.items():
            if job in jobs:
                current = [out.instances.get(r.id, r) for r in mine]
                self._take(
                    net(current, specs, lineage=lineage, now=now), job, out.instances, out.found
                )
        for result in _pool_jobs(
            records, self.specs[cluster], jobs, demand=demand, busy=busy, now=now
        ):
            out.pools.detections += result.detections
            out.pools.requests.update(result.requests)
            out.pools.pools.update(result.pools)
        return out

    def _decide(self, findings: _NetFindings, records: Records, now: float) -> Plan:
        """Under the lock: the plan for what the nets found, its bookkeeping saved."""
        plan = react(
            records,
            [*findings.found, *findings.pools.detections],
            self.specs,
            lineage=self.journal.lineage,
            serial=self.journal.serial,
            now=now,
            instances=findings.instances,
            requests=findings.pools.requests,
            pools=findings.pools.pools,
        )
        self._say_alerts(plan)
        self.applier.commit(plan)
        return plan

    def _act_on(
        self, findings: _NetFindings, records: Records, plan: Plan, report: TickReport
    ) -> None:
        """After the lock: say what the nets found and carry the plan out. A worker just marked
        lost is not drained through Ray (Ray ends a drained idle raylet, and lost never ends a
        machine, DESIGN.md 11): it is out of rotation because it is no longer capacity."""
        found = [*findings.found, *findings.pools.detections]
        instances = findings.instances
        self._announce(found, records, instances)
        # a lost worker is no longer capacity: plan its replacement now, not at the next cadence
        self._wake |= {d_cluster for d_cluster in self._clusters_of(found, "lost", instances)}
        report.detections += found
        actions = self._drained_first(plan.actions, records)
        report.results.append(self.applier.carry_out(actions))

    def _drained_first(self, actions: Sequence[Action], records: Records) -> list[Action]:
        """Scale down as Ray would: an idle worker's node is drained through Ray before the
        money chain stops or destroys it; a drain Ray rejects means work is there, so that end
        is refused and the idle timers start again (as any traffic clears them)."""
        idle_ends = [
            a.record
            for a in actions
            if a.reason in (idle.STOP, idle.DESTROY)
            and a.record is not None
            and _has_ray_node(records.instances.get(a.record))
        ]
        if not idle_ends:
            return list(actions)
        deadline = self.clock.now() + IDLE_DRAIN_DEADLINE_SECONDS
        answer = self._shared(
            "ray_drain", lambda: self.signals.drain_idle(records, idle_ends, deadline), None
        )
        busy = {rid for rid, accepted in (answer or {}).items() if not accepted}
        if not busy:
            return list(actions)
        for record_id in sorted(busy):
            log.info(
                "%s: Ray refused to drain it (work is there): not ended, idle timers cleared",
                record_id,
                extra={"record": record_id, "cls": "refusal", "gate": "ray-drain-rejected"},
            )
            self._stop_called_off(records.instances.get(record_id))
        self.mutate(lambda current, now: _timers_cleared(current, busy, now))
        return [a for a in actions if a.record not in busy]

    def _stop_called_off(self, record: InstanceRecord | None) -> None:
        """A stop asked of the agent that Ray's rejected drain calls off (DESIGN.md 11): the
        record runs on and the agent hears "cancelled" in its next heartbeat answer."""
        if record is None or not stopping.in_handshake(record):
            return
        self.journal.log(
            record.cluster,
            LedgerKind.NOTE,
            stopping.CANCELLED_CLASS,
            f"instance {record.vast_id}: Ray rejected the idle drain (work is there): the stop "
            "is called off before vast's stop; the agent is told, the worker serves on",
            record=record.id,
            instance=record.vast_id,
        )

    def _clusters_of(
        self, found: list[Detection], cls: str, updates: Mapping[str, InstanceRecord]
    ) -> set[str]:
        return {
            updates[d.record].cluster
            for d in found
            if d.cls == cls and d.record in updates and updates[d.record].cluster in self.specs
        }

    def _take(
        self,
        result: NetResult,
        net: str,
        instances: dict[str, InstanceRecord],
        found: list[Detection],
    ) -> None:
        instances.update(result.updates)
        found += result.detections
        if result.refusals and log.isEnabledFor(logging.DEBUG):
            for record, gate in result.refusals:
                log.debug(
                    "%s: %s not acted on: refused by %s",
                    net,
                    record,
                    gate,
                    extra={"net": net, "record": record, "cls": "refusal", "gate": gate},
                )
        if result.detections:
            self.detections_by_net[net] = self.detections_by_net.get(net, 0) + len(
                result.detections
            )

    def _announce(
        self, found: list[Detection], records: Records, updates: Mapping[str, InstanceRecord]
    ) -> None:
        """Say what the nets found (the executor ledgers it with the plan it leads to)."""
        for detection in found:
            record = updates.get(detection.record) or records.instances.get(detection.record)
            cluster = record.cluster if record else _request_cluster(records, detection.record)
            self.progress(
                f"{cluster}: detected {detection.cls} on {detection.record}: {detection.detail}"
            )

    # --- the loop ------------------------------------------------------------------------------

    def run(
        self, stop: threading.Event, *, on_tick: Callable[[TickReport], None] | None = None
    ) -> None:
        """Tick until `stop` is set; SIGTERM sets it, and the tick in progress finishes first."""
        while not stop.is_set():
            report = self.tick()
            if on_tick:
                on_tick(report)
            stop.wait(max(0.5, self.next_wakeup(self.clock.now())))


def _pool_jobs(
    records: Records,
    spec: ClusterSpec,
    jobs: list[str],
    *,
    demand: Mapping[NodeKey, int] | None,
    busy: Mapping[str, bool | None],
    now: float,
) -> list[pools.PoolResult]:
    """The request and pool watchdogs of one cluster that are due now."""
    specs = {spec.name: spec}
    out = []
    if "pool_idle_release" in jobs:
        out.append(pools.pool_idle_release(records, specs, demand=demand, busy=busy, now=now))
    if "queue_wait" in jobs:
        out.append(pools.queue_wait(records, specs, now=now))
    if "no_consumer" in jobs:
        out.append(pools.no_consumer(records, specs, demand=demand))
    if "stuck_dispatch" in jobs:
        cadence = float(spec.cadences.stuck_dispatch_seconds)
        out.append(pools.stuck_dispatch(records, specs, now=now, cadence=cadence))
    return out


@dataclass
class _NetFindings:
    """What the nets of one cluster (or of several, merged) found in a tick."""

    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    found: list[Detection] = field(default_factory=list)
    pools: pools.PoolResult = field(default_factory=pools.PoolResult)

    @property
    def empty(self) -> bool:
        p = self.pools
        return not (self.found or self.instances or p.detections or p.requests or p.pools)

    @staticmethod
    def merge(parts: Iterable[_NetFindings]) -> _NetFindings:
        out = _NetFindings()
        for part in parts:
            out.instances.update(part.instances)
            out.found += part.found
            out.pools.detections += part.pools.detections
            out.pools.requests.update(part.pools.requests)
            out.pools.pools.update(part.pools.pools)
        return out


def _has_ray_node(record: InstanceRecord | None) -> bool:
    """A worker that may have a Ray node to drain (not one vast already stopped)."""
    return (
        record is not None
        and record.role is Role.WORKER
        and record.phase not in (Phase.STOPPED, Phase.STOPPING)
    )


def _timers_cleared(records: Records, record_ids: set[str], now: float) -> Records:
    changed = {
        rid: traffic_again(
            stopping.cancelled(
                replace(records.instances[rid], stop_due_at=None, destroy_due_at=None), now
            ),
            now,
        )
        for rid in record_ids
        if rid in records.instances
    }
    return replace(records, instances={**records.instances, **changed})


def _with_probes(records: Records, ok: Mapping[str, bool], now: float) -> Records:
    """Our control-plane probe of each worker (Ray's view of its node), as `probe_ok_at`."""
    if not ok:
        return records
    instances = {
        rid: replace(r, probe_ok_at=now) if ok.get(rid) else r
        for rid, r in records.instances.items()
    }
    return replace(records, instances=instances)


def _request_cluster(records: Records, request_id: str) -> str:
    request = records.requests.get(request_id)
    return request.cluster if request else "unknown"
