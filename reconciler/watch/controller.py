"""The watch controller: one tick runs every watchdog that is due, on one shared listing.

A tick has two named phases over the agenda (as Ray's autoscaler v2 reconciles in a passive
`_sync_from` and an active `_step_next`): the reconcile phase lists the due clusters once, plans
them and carries the plan out with the one applier; the nets phase (`watch/netting.py`) runs each
due net on the records and carries out one plan for what they found. What is due and when to
wake is the agenda's (`watch/agenda.py`); a cluster whose part raises is contained
(`watch/containment.py`). The records are the journal's, which also hosts them for the head's
enrollment and heartbeat handlers. The clock is injected; the runner (`watch/runner.py`) sleeps.

The lock is held only to decide: a listing, an offer search and a read of Ray are made without
it, the planner and the nets run under it on the records as they are then and their plan's
bookkeeping is saved in the same hold, and the applier makes the calls to vast after it is
released. An enrollment or a heartbeat waits for a decision (milliseconds), never for vast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler import settings
from reconciler.applying.applier import Applier
from reconciler.applying.executor import ApplyResult
from reconciler.applying.journal import Journal, RecordsLock
from reconciler.applying.launch import Launcher
from reconciler.applying.observe import observe_and_plan
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head import tokens
from reconciler.model.applied import HELD_DOWN, following, held_down
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets import dispatch
from reconciler.nets.detection import Detection
from reconciler.planning import alerts, guards, revocation
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.watch import forgetting
from reconciler.watch.agenda import LISTING_JOBS, Agenda
from reconciler.watch.alerting import raise_alert, say_alerts
from reconciler.watch.containment import FAILURE_BACKOFF, Containment
from reconciler.watch.netting import Netting
from reconciler.watch.rayside import RaySide
from reconciler.watch.signals import AgentSignals, Signals

log = logging.getLogger("ray_vast")
T = TypeVar("T")


@dataclass
class TickReport:
    at: float
    jobs: dict[str, list[str]] = field(default_factory=dict)
    detections: list[Detection] = field(default_factory=list)
    results: list[ApplyResult] = field(default_factory=list)
    records: Records | None = None  # as the tick left them


@dataclass
class Controller:
    specs: dict[str, ClusterSpec]
    journal: Journal
    provider: Provider
    launcher: Launcher
    clock: Clock
    signals: Signals = field(default_factory=AgentSignals)
    progress: Callable[[str], None] = lambda line: None
    # The specs are a whole directory (not one file): a cluster it stops declaring is pruned.
    prune: bool = True
    # Policy destroys of most of a cluster go ahead unattended (`watch --allow-mass-destroy`).
    allow_mass_destroy: bool = False
    # How often Ray's demand is read between reconciles (a Ray reader is attached); None: only at
    # the reconcile.
    demand_check_seconds: float | None = None
    # A stop was asked for (the first SIGINT/SIGTERM): a plan stops after the call in flight.
    stop_requested: Callable[[], bool] = lambda: False
    # The job table of the nets (nets/dispatch.py); the benchmarks swap in other policies.
    nets: Mapping[str, dispatch.Net] = field(default_factory=lambda: dict(dispatch.JOBS))
    # Every cluster the source declares; `specs` is those it reconciles (not the ones `down`
    # holds down, `model/applied.py`).
    declared: dict[str, ClusterSpec] = field(init=False, default_factory=dict)
    applier: Applier = field(init=False)
    agenda: Agenda = field(init=False)
    containment: Containment = field(init=False)
    netting: Netting = field(init=False)
    ray: RaySide = field(init=False)

    def __post_init__(self) -> None:
        self.applier = Applier(
            provider=self.provider,
            books=self.journal,
            now=self.clock.now,
            specs=lambda: self.specs,
            launcher_of=lambda: self.launcher,
            progress=self._say,
            on_result=self._ended,
            stop_requested=self.stop_requested,
        )
        self.agenda = Agenda(self.nets, demand_check_seconds=self.demand_check_seconds)
        self.containment = Containment(self.journal.ledger)
        signals, held = (lambda: self.signals), (self.journal, self.containment)
        self.netting = Netting(*held, self.applier, self.clock, self._say, signals, self.nets)
        self.ray = RaySide(*held, self.agenda, self._say, signals)
        self.set_specs(self.specs)

    def use_nets(self, nets: Mapping[str, dispatch.Net]) -> None:
        """Another job table (a benchmark's policy): the nets phase runs it, the agenda brings
        its nets' thresholds forward."""
        self.nets = self.netting.nets = self.agenda.nets = dict(nets)

    @property
    def lock(self) -> RecordsLock:
        """The records lock (the journal's): held to decide, never across a call to vast."""
        return self.journal.lock

    def records(self) -> Records:
        return self.journal.records()

    @property
    def detections_by_net(self) -> Mapping[str, int]:
        return self.netting.detections_by_net

    def set_specs(self, specs: Mapping[str, ClusterSpec], *, revision: str | None = None) -> None:
        """New desired state (a spec file changed): reconcile the changed clusters at the next
        tick, not at the next cadence; schedules keep their other clocks. A cluster `down` holds
        down is declared (not pruned) but not reconciled until its spec changes."""
        with self.lock:
            old = self.specs if self.agenda.schedules else {}
            records = self.journal.records()
            held = held_down(records, specs)
            for name in sorted(held - (self.declared.keys() - self.specs.keys())):
                log.info("%s is held down by `ray-vast down`: %s", name, HELD_DOWN)
            self.declared = dict(specs)
            self.specs = {name: spec for name, spec in specs.items() if name not in held}
            self.agenda.follow(old, self.specs)
            followed = following(records, self.declared, held, revision)
            if followed is not records:
                self.journal.save(followed)

    def _ended(self, result: ApplyResult) -> None:
        """A machine of a cluster ended (whoever's plan it was): list the cluster again at once,
        its slot may need a replacement."""
        self.agenda.wake |= {
            a.cluster
            for a in result.done
            if a.kind is ActionKind.DESTROY and a.cluster in self.specs
        }

    def _say(self, line: str) -> None:
        self.progress(line)  # looked up at each call: a test may set `progress` later

    def _shared(self, part: str, step: Callable[[], T], unknown: T) -> T:
        return self.containment.shared(part, step, unknown, self.specs)

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> TickReport:
        """Every due job of every cluster, in two phases: reconcile, then the nets. A cluster
        whose part raises (its listing and plan, its nets) is logged with the traceback,
        ledgered once and retried with backoff; the other clusters go on in the same tick. A
        signal or prune that raises counts as unknown."""
        now = self.clock.now()
        report = TickReport(now)
        self.containment.begin_tick()
        self.ray.check(self.specs, now)
        due = self._due(now)
        report.jobs = due
        ran = {name: [j for j in jobs if j not in LISTING_JOBS] for name, jobs in due.items()}
        for name, jobs in self._reconcile_phase(now, due, report).items():
            ran.setdefault(name, []).extend(jobs)
        self._nets_phase(now, due, report)
        self._shared(
            "revocation", lambda: self.journal.update(_at(revocation.revoke_ended, now)), None
        )
        for name, jobs in ran.items():
            if self.containment.ok(name):
                self.agenda.ran(name, jobs, now)
        for name in due:
            self.containment.recovered(name)
        report.records = self.journal.records()
        return report

    def _due(self, now: float) -> dict[str, list[str]]:
        records = self.journal.records()
        due: dict[str, list[str]] = {}
        for name in self.agenda.schedules:
            if self.containment.sits_out(name, now):
                continue  # its jobs stay due
            try:
                due[name] = self.agenda.due(name, now, records, self.specs.get(name))
            except Exception as exc:
                self.containment.cluster_failed(name, "schedule", exc, now)
        return due

    def _reconcile_phase(
        self, now: float, due: Mapping[str, list[str]], report: TickReport
    ) -> dict[str, list[str]]:
        """The passive phase: prune, then one listing and plan for the due clusters; the listing
        jobs that did not run are due again soon. The jobs that ran, by cluster."""
        if not any("reconcile" in jobs for jobs in due.values()) and not self._pruning_due(now):
            return {}
        self._shared("token_prune", lambda: self.journal.update(_at(tokens.prune, now)), None)
        self._shared("retention_prune", lambda: forgetting.forget_ended(self.journal, now), None)
        listed = self._reconcile_contained(now, due, report)
        for name, jobs in due.items():
            missed = [j for j in jobs if j in LISTING_JOBS and j not in listed.get(name, [])]
            if missed and self.containment.ok(name):
                self.agenda.missed(name, missed, now)
        return listed

    def _nets_phase(self, now: float, due: Mapping[str, list[str]], report: TickReport) -> None:
        """The active phase: Ray's pins, then the due nets of every cluster that did not fail."""
        self.ray.pins(self.specs)
        ok = {n: j for n, j in due.items() if self.containment.ok(n)}
        outcome = self.netting.run(now, ok, self.specs)
        self.agenda.wake |= outcome.wake
        report.detections += outcome.detections
        report.results += outcome.results

    def _pruning_due(self, now: float) -> bool:
        """Records of a cluster no spec declares any more are pruned on the default reconcile
        cadence even when no declared cluster is due (or none is left)."""
        if not self.prune or not self.agenda.pruning_due(now):
            return False
        return forgetting.undeclared_live(self.journal.records(), self.journal.lineage, self.specs)

    def _reconcile_contained(
        self, now: float, due: Mapping[str, list[str]], report: TickReport
    ) -> dict[str, list[str]]:
        """One listing serves every due cluster. When that shared pass raises, each cluster is
        listed and planned on its own (a plan's scope is its clusters: planning one leaves the
        others alone), so only the cluster whose part raises is held back; what the shared pass
        already carried out is in the records and in vast's next listing."""
        names = [n for n, jobs in due.items() if "reconcile" in jobs]
        kept = self.agenda.kept(names)
        try:
            return self._reconcile(now, due, report)
        except Exception as exc:
            if len(names) <= 1:
                self.agenda.restore(kept)
                for name in names:
                    self.containment.cluster_failed(name, "reconcile", exc, now)
                if not names:  # pruning alone
                    self.containment.shared_failed("prune", exc, self.specs)
                return {}
            log.warning(
                "one listing for %s failed (%s: %s); each cluster is listed on its own",
                *(", ".join(names), type(exc).__name__, exc),
            )
        listed: dict[str, list[str]] = {}
        for name in names:
            kept = self.agenda.kept([name])
            try:
                listed.update(self._reconcile(now, {name: due[name]}, report))
            except Exception as exc:
                self.agenda.restore(kept)
                self.containment.cluster_failed(name, "reconcile", exc, now)
        return listed

    def _reconcile(
        self, now: float, due: Mapping[str, list[str]], report: TickReport
    ) -> dict[str, list[str]]:
        """List and plan the due clusters; the jobs that really ran, by cluster (a failed listing
        runs none: the reconcile and the sweep stay due)."""
        specs = [s for name, s in self.specs.items() if "reconcile" in due.get(name, [])]
        sweep = any("orphan_sweep" in due.get(s.name, []) for s in specs)
        held: list[tuple[str, str]] = []
        plan = observe_and_plan(
            self.provider,
            specs,
            self.journal.records(),
            lineage=self.journal.lineage,
            serial=self.journal.serial,
            now=now,
            ray=self.ray.reports(self.specs, now) or {},
            ray_unread_since=self.ray.unread_since(self.specs, now),
            sweep_orphans=sweep,
            declared=set(self.declared) if self.prune else None,
            settle=lambda plan_on: self._settle(plan_on, held),
        )
        names = [spec.name for spec in specs]
        if plan.errored:
            for error in plan.errors:
                for name in names:
                    self.journal.ledger.append(
                        LedgerEvent(name, LedgerKind.NOTE, error.code, error.text)
                    )
            self.agenda.listing_failed(names, now)
            return {}
        self.agenda.listed(names, now)
        for cluster, why in held:  # after the plan's records are saved, so they keep it
            self.raise_alert(cluster, "mass_destroy_refused", why, now=now)
        report.results.append(self.applier.carry_out(plan.actions))
        return {name: ["reconcile", *(["orphan_sweep"] if sweep else [])] for name in names}

    def _settle(self, plan_on: Callable[[Records], Plan], held: list[tuple[str, str]]) -> Plan:
        """Under the lock: the final plan on the records as they are now, the mass destroys it
        holds back, its bookkeeping saved (the applier's calls come after the lock)."""
        with self.lock:
            plan = plan_on(self.journal.records())
            if plan.errored:
                return plan
            if not self.allow_mass_destroy:
                plan, found = guards.hold_mass_destroys(plan, self.journal.records())
                held.extend(found)
            say_alerts(self._say, plan.alerts)
            self.applier.commit(plan)
            return plan

    # --- the head's and the runner's -----------------------------------------------------------

    def raise_alert(
        self, cluster: str, cls: str, message: str, *, now: float, record: str | None = None
    ) -> None:
        """An alert for a person: in the records (`status`), the ledger and the log, unless the
        same one was raised within the window (planning/alerts.py)."""
        concern = alerts.Concern(cluster, cls, message, record)
        raise_alert(self.journal, self._say, concern, now)

    def next_wakeup(self, now: float) -> float:
        """Seconds until the next tick has work: the next job of any cadence, or the earliest
        deadline a record holds (a limit fires within seconds of its threshold); a cluster that
        failed waits for its retry."""
        with self.lock:
            records = self.journal.records()
            waits: list[float] = []
            for name in self.agenda.schedules:
                try:
                    mine = self.agenda.wakeups(name, now, records, self.specs.get(name))
                except Exception:
                    mine = [FAILURE_BACKOFF.first]  # the tick says why
                waits += [self.containment.wait(name, w, now) for w in mine]
            waits += self.agenda.demand_wait(now)
            return min(waits) if waits else settings.IDLE_WAKEUP_SECONDS


def _at(change: Callable[[Records, float], Records], now: float) -> Callable[[Records], Records]:
    return lambda records: change(records, now)
