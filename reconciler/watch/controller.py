"""The watch controller: one tick runs every watchdog that is due, on one shared listing.

It holds the records (through the journal) behind one lock, so the head's enrollment and heartbeat
handlers and the nets see and change the same state. A tick is: reconcile when due (one listing,
the planner, the executor), then each due net on the records, their detections written to the
ledger and routed through the one table into a plan for the same executor. The clock is injected;
the loop that sleeps between ticks is `run`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from reconciler.applying.executor import ApplyResult, Executor
from reconciler.applying.journal import Journal
from reconciler.applying.launch import Launcher
from reconciler.applying.observe import observe_and_plan
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head import tokens
from reconciler.model.observation import NodeKey
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import Alert, ClusterRecord, InstanceRecord, Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets import idle, lost, never_reported, pools, went_silent
from reconciler.nets.base import NetResult
from reconciler.nets.detection import Detection
from reconciler.planning import deadlines, guards, retention, revocation
from reconciler.planning.react import react
from reconciler.state.ledger import LedgerKind
from reconciler.watch.schedule import Schedule

log = logging.getLogger("ray_vast")


class Signals(Protocol):
    """What the controller learns from Ray and the agents, read once per tick. Anything that
    could not be read is "unknown" (None), never "no demand" or "idle"."""

    def demand(self, specs: Mapping[str, ClusterSpec]) -> Mapping[NodeKey, int] | None: ...

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]: ...

    def probes(self, records: Records) -> Mapping[str, bool]: ...

    def work(self, records: Records) -> Mapping[str, bool] | None:
        """Per record of the clusters this reader serves: whether Ray reports work on its node
        (leased resources, actors, placement-group bundles; False when Ray has no live node of
        it); None when Ray could not be read. Records it does not name keep their pin."""
        ...

    def drain(self, records: Records, record_ids: Sequence[str], reason: str) -> None:
        """Ask Ray to stop scheduling onto these records' nodes (a lost worker leaves
        rotation); best effort."""
        ...


class AgentSignals:
    """Signals from the agents' own heartbeat samples only (no Ray reader attached)."""

    def __init__(self, freshness: float = 90.0) -> None:
        self.freshness = freshness

    def demand(self, specs: Mapping[str, ClusterSpec]) -> Mapping[NodeKey, int]:
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

    def drain(self, records: Records, record_ids: Sequence[str], reason: str) -> None:
        return None


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
    lock: threading.RLock = field(default_factory=threading.RLock)
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

    def __post_init__(self) -> None:
        self.set_specs(self.specs)

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

    def execute(self, plan: Plan) -> ApplyResult:
        """Carry out a plan with the one executor (the head uses this for immediate destroys).
        Alerts are said in the log as well as kept for `status`."""
        for note in plan.notes:
            if note.startswith("ALERT"):
                self.progress(note)
        with self.lock:
            executor = Executor(
                provider=self.provider,
                journal=self.journal,
                launcher=self.launcher,
                specs=self.specs,
                now=self.clock.now,
                progress=self.progress,
            )
            result = executor.apply(plan)
            self._wake |= {
                a.cluster
                for a in result.done
                if a.kind is ActionKind.DESTROY and a.cluster in self.specs
            }
            return result

    # --- one tick ------------------------------------------------------------------------------

    def tick(self) -> TickReport:
        with self.lock:
            now = self.clock.now()
            report = TickReport(now)
            due = {name: s.due(now) for name, s in self.schedules.items()}
            for name in self.specs:
                if self._listing_due(name, now) and "reconcile" not in due[name]:
                    due[name].append("reconcile")
                for job, at in self._net_deadlines(name).items():
                    if at <= now and job not in due[name]:
                        due[name].append(job)
            report.jobs = due
            ran: dict[str, list[str]] = {
                name: [j for j in jobs if j not in LISTING_JOBS] for name, jobs in due.items()
            }
            if any("reconcile" in jobs for jobs in due.values()) or self._pruning_due(now):
                self.mutate(tokens.prune)  # join tokens nobody can use any more
                self.mutate(retention.prune)  # machines ended long ago: the ledger keeps them
                listed = self._reconcile(now, due, report)
                for name, jobs in listed.items():
                    ran.setdefault(name, []).extend(jobs)
                for name, jobs in due.items():
                    missed = [
                        j for j in jobs if j in LISTING_JOBS and j not in listed.get(name, [])
                    ]
                    if missed and name in self.schedules:
                        self.schedules[name].retry(missed, now, LISTING_RETRY_SECONDS)
            self._update_pins(now)
            self._run_nets(now, due, report)
            self.mutate(revocation.revoke_ended)  # ended, refused and lost workers' certificates
            for name, jobs in ran.items():
                if name in self.schedules:
                    self.schedules[name].ran(jobs, now)
            report.records = self.journal.records()
            return report

    def next_wakeup(self, now: float) -> float:
        """Seconds until the next tick has work: the next job of any cadence, or the earliest
        deadline a record holds (a limit fires within seconds of its threshold)."""
        with self.lock:
            waits = [s.next_due(now) for s in self.schedules.values()]
            records = self.journal.records()
            for name, spec in self.specs.items():
                at = deadlines.next_listing(
                    records.instances.values(),
                    records.requests.values(),
                    spec,
                    after=self.listed_at.get(name, float("-inf")),
                )
                if name in self._wake:
                    at = now
                if at is not None:
                    waits.append(max(0.0, at - now, self._retry_at(name) - now))
                waits += [max(0.0, at - now) for at in self._net_deadlines(name).values()]
            return min(waits) if waits else 30.0

    def _net_deadlines(self, name: str) -> dict[str, float]:
        """The machine nets' thresholds that a record of `name` reaches after the net last ran."""
        schedule = self.schedules.get(name)
        if schedule is None:
            return {}
        found = deadlines.net_deadlines(self.journal.records().instances.values(), self.specs[name])
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
        records = self.journal.records()
        at = deadlines.next_listing(
            records.instances.values(),
            records.requests.values(),
            self.specs[name],
            after=self.listed_at.get(name, float("-inf")),
        )
        return at is not None and at <= now

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
        demand = self.signals.demand(self.specs)
        plan = observe_and_plan(
            self.provider,
            specs,
            self.journal.records(),
            lineage=self.journal.lineage,
            serial=self.journal.serial,
            now=now,
            demand=demand or {},
            sweep_orphans=sweep,
            declared=set(self.specs) if self.prune else None,
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
        held: list[tuple[str, str]] = []
        if not self.allow_mass_destroy:
            plan, held = guards.hold_mass_destroys(plan, self.journal.records())
        report.results.append(self.execute(plan))
        for cluster, why in held:  # after the plan's records are saved, so they keep it
            self.raise_alert(cluster, "mass_destroy_refused", why, now=now)
        return {s.name: ["reconcile", *(["orphan_sweep"] if sweep else [])] for s in specs}

    def raise_alert(
        self, cluster: str, cls: str, message: str, *, now: float, record: str | None = None
    ) -> None:
        """An alert for a person: in the records (`status`), the ledger and the log; the same
        alert is not raised again within an hour."""
        with self.lock:
            records = self.journal.records()
            recent = any(
                a.cluster == cluster and a.cls == cls and a.record == record and now - a.at < 3600
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
        records = self._with_probes(self.journal.records(), now)
        busy = self.signals.busy(records, now)
        lineage = self.journal.lineage
        instances: dict[str, InstanceRecord] = {}
        found: list[Detection] = []
        for cluster, jobs in due.items():
            specs = {cluster: self.specs[cluster]}
            mine = [r for r in records.instances.values() if r.cluster == cluster]
            if "idle_scan" in jobs and self.idle_scanner:
                self._take(
                    idle.scan(mine, specs, busy=busy, lineage=lineage, now=now),
                    "idle_scan",
                    instances,
                    found,
                )
            for job, net in self.machine_nets.items():
                if job in jobs:
                    current = [instances.get(r.id, r) for r in mine]
                    self._take(net(current, specs, lineage=lineage, now=now), job, instances, found)
        request_result = self._pool_nets(records, now, due, busy)
        found += request_result.detections
        if not found and not instances and not request_result.requests and not request_result.pools:
            return
        self._announce(found, records, instances)
        self._drain_lost(records, instances)
        # a lost worker is no longer capacity: plan its replacement now, not at the next cadence
        self._wake |= {d_cluster for d_cluster in self._clusters_of(found, "lost", instances)}
        report.detections += found
        plan = react(
            records,
            found,
            self.specs,
            lineage=lineage,
            serial=self.journal.serial,
            now=now,
            instances=instances,
            requests=request_result.requests,
            pools=request_result.pools,
        )
        report.results.append(self.execute(plan))

    def _clusters_of(
        self, found: list[Detection], cls: str, updates: Mapping[str, InstanceRecord]
    ) -> set[str]:
        return {
            updates[d.record].cluster
            for d in found
            if d.cls == cls and d.record in updates and updates[d.record].cluster in self.specs
        }

    def _drain_lost(self, records: Records, updates: Mapping[str, InstanceRecord]) -> None:
        """A worker just marked lost leaves rotation: Ray stops sending it work (while Ray still
        sees it), and the planner no longer counts it as capacity. Never a destroy."""
        newly = [
            rid
            for rid, r in updates.items()
            if r.lost and not (records.instances.get(rid) or r).lost
        ]
        if newly:
            self.signals.drain(records, newly, "lost: no liveness channel answers")

    def _take(
        self,
        result: NetResult,
        net: str,
        instances: dict[str, InstanceRecord],
        found: list[Detection],
    ) -> None:
        instances.update(result.updates)
        found += result.detections
        if result.detections:
            self.detections_by_net[net] = self.detections_by_net.get(net, 0) + len(
                result.detections
            )

    def _pool_nets(
        self,
        records: Records,
        now: float,
        due: Mapping[str, list[str]],
        busy: Mapping[str, bool | None],
    ) -> pools.PoolResult:
        merged = pools.PoolResult()
        for cluster, jobs in due.items():
            for result in _pool_jobs(
                records, self.specs[cluster], jobs, signals=self.signals, busy=busy, now=now
            ):
                merged.detections += result.detections
                merged.requests.update(result.requests)
                merged.pools.update(result.pools)
        return merged

    def _with_probes(self, records: Records, now: float) -> Records:
        """Our control-plane probe of each worker (Ray's view of its node), as `probe_ok_at`."""
        ok = self.signals.probes(records)
        if not ok:
            return records
        instances = {
            rid: replace(r, probe_ok_at=now) if ok.get(rid) else r
            for rid, r in records.instances.items()
        }
        return replace(records, instances=instances)

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
    signals: Signals,
    busy: Mapping[str, bool | None],
    now: float,
) -> list[pools.PoolResult]:
    """The request and pool watchdogs of one cluster that are due now."""
    specs = {spec.name: spec}
    demand = signals.demand(specs)
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


def _request_cluster(records: Records, request_id: str) -> str:
    request = records.requests.get(request_id)
    return request.cluster if request else "unknown"
