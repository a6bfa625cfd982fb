"""The nets phase of a tick: each cluster's due nets on the records, then one plan for all.

What Ray says (probes, busy, demand) is read first, without the records lock; the nets
(`nets/dispatch.py`) and the plan for what they found (`planning/react.py`) run under the lock on
the records as they are then, and its bookkeeping is saved in the same hold; the plan's calls to
vast are made by the one applier after the lock is released. A cluster whose nets raise is held
back (containment); when the shared plan raises, each cluster's findings are planned on their own.

Scale-down goes as Ray's does: an idle worker's node is drained through Ray before the money chain
stops or destroys it, and a drain Ray rejects means work is there: that end is refused and the
idle timers start again. A worker just marked lost is not drained (Ray ends a drained idle raylet,
and lost never ends a machine, DESIGN.md 11); its cluster is listed at the next tick instead, so
its replacement is planned now rather than at the next cadence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler import settings
from reconciler.applying.applier import Applier
from reconciler.applying.executor import ApplyResult
from reconciler.applying.journal import Journal
from reconciler.clock import Clock
from reconciler.model import stopping
from reconciler.model.observation import NodeKey
from reconciler.model.plan import Action, Plan
from reconciler.model.records import InstanceRecord, Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets import dispatch, idle
from reconciler.nets.detection import Detection
from reconciler.planning import raydemand
from reconciler.planning.react import react
from reconciler.state.clusterlog import ClusterLog
from reconciler.watch.alerting import say_alerts
from reconciler.watch.containment import Containment
from reconciler.watch.signals import Signals

log = logging.getLogger("ray_vast")


@dataclass
class NetsOutcome:
    """What the nets phase did: what it found, the calls made, and the clusters to list at once
    (a worker of theirs was just marked lost: it is no longer capacity)."""

    detections: list[Detection] = field(default_factory=list)
    results: list[ApplyResult] = field(default_factory=list)
    wake: set[str] = field(default_factory=set)


@dataclass
class _Readings:
    """Ray's view for one nets phase, read before the lock."""

    probes: Mapping[str, bool]
    busy: Mapping[str, bool | None]
    demands: Mapping[str, Mapping[NodeKey, int] | None]


@dataclass
class Netting:
    """Runs the nets phase for the controller, on its journal, applier and containment."""

    journal: Journal
    containment: Containment
    applier: Applier
    clock: Clock
    say: Callable[[str], None]
    signals: Callable[[], Signals]  # the controller's, looked up at each read (tests swap it)
    nets: Mapping[str, dispatch.Net] = field(default_factory=lambda: dict(dispatch.JOBS))
    detections_by_net: dict[str, int] = field(default_factory=dict)

    def run(
        self, now: float, due: Mapping[str, list[str]], specs: Mapping[str, ClusterSpec]
    ) -> NetsOutcome:
        out = NetsOutcome()
        seen = self.journal.records()
        readings = self._read(seen, now, due, specs)
        decided: list[tuple[dispatch.Findings, Records, Plan]] = []
        with self.journal.lock:
            records = dispatch.with_probes(self.journal.records(), readings.probes, now)
            parts = self._findings(records, now, due, specs, readings)
            merged = dispatch.Findings.merge(parts.values())
            if merged.empty:
                return out
            decided = self._plans(merged, parts, records, specs, now)
        for findings, before, plan in decided:
            self._act_on(findings, before, plan, specs, out)
        return out

    def _read(
        self,
        seen: Records,
        now: float,
        due: Mapping[str, list[str]],
        specs: Mapping[str, ClusterSpec],
    ) -> _Readings:
        share = self.containment.shared
        probes: Mapping[str, bool] = share(
            "ray_probes", lambda: self.signals().probes(seen), {}, specs
        )
        probed = dispatch.with_probes(seen, probes, now)
        busy: Mapping[str, bool | None] = share(
            "ray_busy", lambda: self.signals().busy(probed, now), {}, specs
        )
        demands = {
            cluster: self._demand_of(cluster, specs, seen)
            for cluster, jobs in due.items()
            if dispatch.needs_demand(jobs) and cluster in specs
        }
        return _Readings(probes, busy, demands)

    def _demand_of(
        self, cluster: str, specs: Mapping[str, ClusterSpec], seen: Records
    ) -> Mapping[NodeKey, int] | None:
        """The workers Ray's report of the cluster needs per node type (None: unread)."""
        mine = {cluster: specs[cluster]}
        reports = self.containment.shared(
            f"ray_demand of {cluster}", lambda: self.signals().reports(mine), None, specs
        )
        if reports is None:
            return None
        return raydemand.wanted_of(raydemand.readings(reports, mine, seen))

    def _findings(
        self,
        records: Records,
        now: float,
        due: Mapping[str, list[str]],
        specs: Mapping[str, ClusterSpec],
        readings: _Readings,
    ) -> dict[str, dispatch.Findings]:
        """Each due cluster's nets, under the lock; a cluster whose nets raise is held back."""
        parts: dict[str, dispatch.Findings] = {}
        for cluster, jobs in due.items():
            try:
                inputs = dispatch.Inputs(
                    spec=specs[cluster],
                    records=records,
                    busy=readings.busy,
                    demand=readings.demands.get(cluster),
                    lineage=self.journal.lineage,
                    now=now,
                )
                parts[cluster] = self._logged(dispatch.run(jobs, inputs, self.nets))
            except Exception as exc:
                self.containment.cluster_failed(cluster, "nets", exc, now)
        return parts

    def _logged(self, findings: dispatch.Findings) -> dispatch.Findings:
        """The nets' refusals go to the debug log; their detections are counted per net."""
        if findings.refusals and log.isEnabledFor(logging.DEBUG):
            for net, record, gate in findings.refusals:
                log.debug(
                    "%s: %s not acted on: refused by %s",
                    *(net, record, gate),
                    extra={"net": net, "record": record, "cls": "refusal", "gate": gate},
                )
        for net, count in findings.by_net.items():
            self.detections_by_net[net] = self.detections_by_net.get(net, 0) + count
        return findings

    def _plans(
        self,
        merged: dispatch.Findings,
        parts: Mapping[str, dispatch.Findings],
        records: Records,
        specs: Mapping[str, ClusterSpec],
        now: float,
    ) -> list[tuple[dispatch.Findings, Records, Plan]]:
        """Under the lock: one plan for what every cluster's nets found; when it raises, one
        plan per cluster, so only the cluster whose plan raises is held back."""
        try:
            return [(merged, records, self._decide(merged, records, specs, now))]
        except Exception as exc:
            if len(parts) <= 1:
                for cluster in parts:
                    self.containment.cluster_failed(cluster, "nets", exc, now)
                return []
            log.warning(
                "one plan for the nets' findings failed (%s: %s); each cluster on its own",
                type(exc).__name__,
                exc,
            )
        decided = []
        for cluster, part in parts.items():
            if part.empty:
                continue
            try:
                current = self.journal.records()
                decided.append((part, current, self._decide(part, current, specs, now)))
            except Exception as exc:
                self.containment.cluster_failed(cluster, "nets", exc, now)
        return decided

    def _decide(
        self,
        findings: dispatch.Findings,
        records: Records,
        specs: Mapping[str, ClusterSpec],
        now: float,
    ) -> Plan:
        """Under the lock: the plan for what the nets found, its bookkeeping saved."""
        plan = react(
            records,
            findings.detections,
            specs,
            lineage=self.journal.lineage,
            serial=self.journal.serial,
            now=now,
            instances=findings.instances,
            requests=findings.pools.requests,
            pools=findings.pools.pools,
        )
        say_alerts(self.say, plan.alerts)
        self.applier.commit(plan)
        return plan

    def _act_on(
        self,
        findings: dispatch.Findings,
        records: Records,
        plan: Plan,
        specs: Mapping[str, ClusterSpec],
        out: NetsOutcome,
    ) -> None:
        """After the lock: say what the nets found and carry the plan out."""
        found = findings.detections
        self._announce(found, records, findings.instances)
        out.wake |= _clusters_of(found, "lost", findings.instances, specs)
        out.detections += found
        actions = self._drained_first(plan.actions, records, specs)
        out.results.append(self.applier.carry_out(actions))

    def _drained_first(
        self, actions: Sequence[Action], records: Records, specs: Mapping[str, ClusterSpec]
    ) -> list[Action]:
        """Scale down as Ray would: an idle worker's node is drained through Ray before the
        money chain stops or destroys it; a drain Ray rejects means work is there, so that end
        is refused and the idle timers start again (as any traffic clears them)."""
        idle_ends = [
            a.record
            for a in actions
            if a.reason in (idle.STOP, idle.DESTROY)
            and a.record is not None
            and dispatch.has_ray_node(records.instances.get(a.record))
        ]
        if not idle_ends:
            return list(actions)
        deadline = self.clock.now() + settings.IDLE_DRAIN_DEADLINE_SECONDS
        answer: Mapping[str, bool] | None = self.containment.shared(
            "ray_drain",
            lambda: self.signals().drain_idle(records, idle_ends, deadline),
            None,
            specs,
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
        now = self.clock.now()
        self.journal.update(lambda current: dispatch.timers_cleared(current, busy, now))
        return [a for a in actions if a.record not in busy]

    def _stop_called_off(self, record: InstanceRecord | None) -> None:
        """A stop asked of the agent that Ray's rejected drain calls off (DESIGN.md 11): the
        record runs on and the agent hears "cancelled" in its next heartbeat answer."""
        if record is None or not stopping.in_handshake(record):
            return
        ClusterLog(record.cluster, self.journal.ledger, log).note(
            logging.INFO,
            stopping.CANCELLED_CLASS,
            f"instance {record.vast_id}: Ray rejected the idle drain (work is there): the stop "
            "is called off before vast's stop; the agent is told, the worker serves on",
            record=record.id,
            instance=record.vast_id,
        )

    def _announce(
        self, found: list[Detection], records: Records, updates: Mapping[str, InstanceRecord]
    ) -> None:
        """Say what the nets found (the executor ledgers it with the plan it leads to)."""
        for detection in found:
            record = updates.get(detection.record) or records.instances.get(detection.record)
            cluster = record.cluster if record else _request_cluster(records, detection.record)
            self.say(
                f"{cluster}: detected {detection.cls} on {detection.record}: {detection.detail}"
            )


def _clusters_of(
    found: list[Detection],
    cls: str,
    updates: Mapping[str, InstanceRecord],
    specs: Mapping[str, ClusterSpec],
) -> set[str]:
    return {
        updates[d.record].cluster
        for d in found
        if d.cls == cls and d.record in updates and updates[d.record].cluster in specs
    }


def _request_cluster(records: Records, request_id: str) -> str:
    request = records.requests.get(request_id)
    return request.cluster if request else "unknown"
