"""The four ending policies the fleet benchmark compares, each on the same engine.

Each policy is a set of machine nets for the controller's job table (`nets/dispatch.table`, keyed
by the schedule's job names, so each net keeps its cadence), whether the idle scanner runs,
whether the orphan sweep runs, and spec overrides. Everything else (planner, listing checks,
executor, ledger, routing) is the real code, unchanged, so a difference in the bill is a
difference of policy alone.

1. `ray-vast`: the default controller, as specified (five nets and the money chain).
2. `merged`: the heartbeat nets (never-reported, went-silent, lost) replaced by ONE permissive
   health check that destroys a worker when no channel at all (provider listing, our probe, its
   own report) has been heard for `MERGED_THRESHOLD` seconds. The planner's listing checks and the
   money chain stay. This is the "one clever check" the first seed warns against.
3. `provider-only`: a machine ends only when vast's listing stops showing it or shows it exited
   (liveness as the provider sees it, as Ray's autoscaler v2 reads its cloud provider). No
   heartbeat nets, no money chain, no orphan sweep, and our own time limits on a candidate (pull
   limit, enrollment limit, provisioning deadline) pushed out of reach.
4. `idle-only`: the money chain alone (idle scanner, auto-stop, auto-destroy); no went-silent,
   never-reported or lost nets. The planner's listing checks and the orphan sweep stay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reconciler.model.records import InstanceRecord
from reconciler.nets import dispatch
from reconciler.nets.base import NetResult, Specs, serving_workers
from reconciler.nets.detection import Detection
from reconciler.nets.dispatch import MACHINE_NETS, MachineNet
from reconciler.nets.reaper import Gate, refusal
from reconciler.watch.controller import Controller

MERGED_THRESHOLD = 1800.0
# Routed through the real table: the merged check ends a machine the way went-silent does.
MERGED_CLASS = "went_silent"
# Far beyond any simulated period: a time limit the provider-only policy does not have.
NEVER = 10 * 365 * 86_400


def merged_health_check(
    records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float
) -> NetResult:
    """Destroy a worker when NO channel has been heard for `MERGED_THRESHOLD` seconds.

    The provider channel is read as the lost detector reads it ("listed running",
    `provider_ok_at`), the most favourable reading for this policy: with "listed at all" it would
    not even catch a host that went offline. Its threshold is permissive because one number has to
    spare a machine in a slow phase; the reaper's refusals are walked as every net walks them."""
    result = NetResult()
    for record in serving_workers(records):
        if record.cluster not in specs:
            continue
        heard = [
            t
            for t in (record.provider_ok_at, record.probe_ok_at, record.self_report_at)
            if t is not None
        ]
        last = max(heard, default=record.enrolled_at or record.created_at)
        if now - last <= MERGED_THRESHOLD:
            continue
        gate = Gate(MERGED_THRESHOLD, heartbeat_net=True)
        why = refusal(record, lineage=lineage, now=now, gate=gate)
        if why is not None:
            result.refusals.append((record.id, why.value))
            continue
        detail = (
            f"merged check: no channel heard for {now - last:.0f}s (limit {MERGED_THRESHOLD:.0f}s)"
        )
        result.detections.append(Detection(record.id, MERGED_CLASS, detail, record.vast_id))
    return result


@dataclass(frozen=True)
class Policy:
    """How one policy sets up the same engine."""

    name: str
    summary: str
    machine_nets: Mapping[str, MachineNet]
    idle_scanner: bool = True
    orphan_sweep: bool = True
    # spec overrides: watchdog thresholds and node-type fields, by name
    watchdogs: Mapping[str, int] = field(default_factory=dict)
    node_type: Mapping[str, int] = field(default_factory=dict)

    def apply(self, controller: Controller) -> None:
        """Plug this policy into a freshly built controller (before its first tick)."""
        controller.use_nets(dispatch.table(self.machine_nets, idle_scanner=self.idle_scanner))
        if not self.orphan_sweep:
            for schedule in controller.agenda.schedules.values():
                schedule.periods["orphan_sweep"] = math.inf


def _nets(*jobs: str, extra: Mapping[str, MachineNet] | None = None) -> dict[str, MachineNet]:
    return {**{job: MACHINE_NETS[job] for job in jobs}, **(extra or {})}


MONEY_CHAIN = ("auto_stop", "auto_destroy")

RAY_VAST = Policy("ray-vast", "five nets + money chain (default Controller)", dict(MACHINE_NETS))
MERGED = Policy(
    "merged-1800s",
    f"one health check, any channel, {MERGED_THRESHOLD:.0f}s; money chain",
    # the went-silent job's slot (60 s cadence) runs the merged check instead
    _nets(*MONEY_CHAIN, extra={"went_silent": merged_health_check}),
)
PROVIDER_ONLY = Policy(
    "provider-only",
    "ends only when vast's listing drops it or shows it exited",
    {},
    idle_scanner=False,
    orphan_sweep=False,
    watchdogs={"enrollment_limit_seconds": NEVER, "provision_deadline_seconds": NEVER},
    node_type={"pull_limit_seconds": NEVER},
)
IDLE_ONLY = Policy(
    "idle-only", "money chain only; listing checks + orphan sweep", _nets(*MONEY_CHAIN)
)

POLICIES: tuple[Policy, ...] = (RAY_VAST, MERGED, PROVIDER_ONLY, IDLE_ONLY)
BY_NAME: Mapping[str, Policy] = {p.name: p for p in POLICIES}
