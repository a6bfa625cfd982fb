"""One table from each scheduled job to its net, with one signature.

Every watchdog job of `watch/schedule.JOBS` but the two that run on a listing (the reconcile and
the orphan sweep, which are the planner's) is a net here: the idle scanner, the four machine nets
and the money chain's two acting nets, and the four request and pool watchdogs. Each takes the
same `Inputs` (one cluster's records, spec, Ray's busy and demand readings, the time) and the
cluster's instance records as the nets before it in this tick left them, and returns `Findings`:
record updates, detections, request and pool changes, and the refusals of its gates, which the
loop logs. Pure: the controller reads Ray before and acts on the plan after.

Order matters and is the table's: the scanner (or, when only an acting net is due, its clearing:
the traffic this pass read clears the timers before anything acts on them) runs first, then the
machine nets, each on the records the ones before it updated, then the pool watchdogs on the
records of the tick. A benchmark swaps machine nets in with `table`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.model import stopping
from reconciler.model.evolve import evolve
from reconciler.model.observation import NodeKey
from reconciler.model.records import InstanceRecord, Phase, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.model.stretches import traffic_again
from reconciler.nets import idle, lost, never_reported, pools, went_silent
from reconciler.nets.base import NetResult
from reconciler.nets.detection import Detection
from reconciler.nets.pools import PoolResult


@dataclass(frozen=True)
class Inputs:
    """What every net of one cluster reads in one tick."""

    spec: ClusterSpec
    records: Records
    busy: Mapping[str, bool | None]  # per record: Ray's or the agent's traffic; None: unknown
    demand: Mapping[NodeKey, int] | None  # Ray's demand for the cluster; None: unread
    lineage: str
    now: float


@dataclass
class Findings:
    """What the nets of one cluster (or of several, merged) found in a tick."""

    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    found: list[Detection] = field(default_factory=list)
    pools: PoolResult = field(default_factory=PoolResult)
    refusals: list[tuple[str, str, str]] = field(default_factory=list)  # (net, record, gate)
    by_net: dict[str, int] = field(default_factory=dict)  # detections per machine net

    @property
    def empty(self) -> bool:
        p = self.pools
        return not (self.found or self.instances or p.detections or p.requests or p.pools)

    @property
    def detections(self) -> list[Detection]:
        return [*self.found, *self.pools.detections]

    def take(self, net: str, result: NetResult) -> None:
        self.instances.update(result.updates)
        self.found += result.detections
        self.refusals += [(net, record, gate) for record, gate in result.refusals]
        self._count(net, len(result.detections))

    def take_pools(self, result: PoolResult) -> None:
        self.pools.detections += result.detections
        self.pools.requests.update(result.requests)
        self.pools.pools.update(result.pools)

    def _count(self, net: str, found: int) -> None:
        if found:
            self.by_net[net] = self.by_net.get(net, 0) + found

    @staticmethod
    def merge(parts: Iterable[Findings]) -> Findings:
        out = Findings()
        for part in parts:
            out.instances.update(part.instances)
            out.found += part.found
            out.take_pools(part.pools)
            out.refusals += part.refusals
            for net, count in part.by_net.items():
                out._count(net, count)
        return out


# A net: the cluster's inputs and its instance records as the nets before it left them, into what
# it found (recorded in `out`).
Net = Callable[[Inputs, Sequence[InstanceRecord], Findings], None]
# The machine nets' own signature (nets/base.py), which the benchmarks' policies also write.
MachineNet = Callable[..., NetResult]

MACHINE_NETS: Mapping[str, MachineNet] = {
    "boot_failure": never_reported.run,
    "went_silent": went_silent.run,
    "lost": lost.run,
    "auto_stop": idle.auto_stop,
    "auto_destroy": idle.auto_destroy,
}
# The money chain's acting nets: the scanner's clearing runs before them in every pass.
ACTING_ON_QUIET = frozenset({"auto_stop", "auto_destroy"})
IDLE_SCAN = "idle_scan"


def _specs(inputs: Inputs) -> dict[str, ClusterSpec]:
    return {inputs.spec.name: inputs.spec}


def machine(job: str, net: MachineNet) -> Net:
    """A machine net as a table entry."""

    def run(inputs: Inputs, mine: Sequence[InstanceRecord], out: Findings) -> None:
        out.take(job, net(mine, _specs(inputs), lineage=inputs.lineage, now=inputs.now))

    return run


def _idle_scan(inputs: Inputs, mine: Sequence[InstanceRecord], out: Findings) -> None:
    found = idle.scan(
        mine, _specs(inputs), busy=inputs.busy, lineage=inputs.lineage, now=inputs.now
    )
    out.take(IDLE_SCAN, found)


def _idle_clear(inputs: Inputs, mine: Sequence[InstanceRecord], out: Findings) -> None:
    out.take(IDLE_SCAN, idle.clear(mine, busy=inputs.busy, now=inputs.now))


def _pool_idle_release(inputs: Inputs, _mine: Sequence[InstanceRecord], out: Findings) -> None:
    found = pools.pool_idle_release(
        inputs.records, _specs(inputs), demand=inputs.demand, busy=inputs.busy, now=inputs.now
    )
    out.take_pools(found)


def _queue_wait(inputs: Inputs, _mine: Sequence[InstanceRecord], out: Findings) -> None:
    out.take_pools(pools.queue_wait(inputs.records, _specs(inputs), now=inputs.now))


def _no_consumer(inputs: Inputs, _mine: Sequence[InstanceRecord], out: Findings) -> None:
    found = pools.no_consumer(inputs.records, _specs(inputs), demand=inputs.demand)
    out.take_pools(found)


def _stuck_dispatch(inputs: Inputs, _mine: Sequence[InstanceRecord], out: Findings) -> None:
    cadence = float(inputs.spec.cadences.stuck_dispatch_seconds)
    found = pools.stuck_dispatch(inputs.records, _specs(inputs), now=inputs.now, cadence=cadence)
    out.take_pools(found)


POOL_JOBS: Mapping[str, Net] = {
    "pool_idle_release": _pool_idle_release,
    "queue_wait": _queue_wait,
    "no_consumer": _no_consumer,
    "stuck_dispatch": _stuck_dispatch,
}


def table(machine_nets: Mapping[str, MachineNet], *, idle_scanner: bool = True) -> dict[str, Net]:
    """The job table for a set of machine nets (the default: `MACHINE_NETS`); without the idle
    scanner nothing arms or clears the money chain's timers."""
    scanner: dict[str, Net] = {IDLE_SCAN: _idle_scan} if idle_scanner else {}
    machines = {job: machine(job, net) for job, net in machine_nets.items()}
    return {**scanner, **machines, **POOL_JOBS}


JOBS: Mapping[str, Net] = table(MACHINE_NETS)


def needs_demand(jobs: Iterable[str]) -> bool:
    """Whether one of these jobs reads Ray's demand (the loop reads it only then)."""
    return any(job in POOL_JOBS for job in jobs)


def run(jobs: Sequence[str], inputs: Inputs, nets: Mapping[str, Net] = JOBS) -> Findings:
    """The due `jobs` of one cluster, in the table's order."""
    out = Findings()
    mine = inputs.records.index.of_cluster(inputs.spec.name)
    due = set(jobs)
    if IDLE_SCAN in nets and IDLE_SCAN not in due and ACTING_ON_QUIET & due:
        _idle_clear(inputs, mine, out)
    for job, net in nets.items():
        if job in due:
            net(inputs, [out.instances.get(r.id, r) for r in mine], out)
    return out


def with_probes(records: Records, ok: Mapping[str, bool], now: float) -> Records:
    """Our control-plane probe of each worker (Ray's view of its node), as `probe_ok_at`."""
    if not ok:
        return records
    instances = {
        rid: evolve(r, probe_ok_at=now) if ok.get(rid) else r
        for rid, r in records.instances.items()
    }
    return evolve(records, instances=instances)


def has_ray_node(record: InstanceRecord | None) -> bool:
    """A worker that may have a Ray node to drain (not one vast already stopped)."""
    return (
        record is not None
        and record.role is Role.WORKER
        and record.phase not in (Phase.STOPPED, Phase.STOPPING)
    )


def timers_cleared(records: Records, record_ids: set[str], now: float) -> Records:
    """Ray rejected the drain of these idle workers (work is there): their idle timers clear
    and a stop asked of their agents is called off, as any traffic would."""
    changed = {
        rid: traffic_again(
            stopping.cancelled(
                evolve(records.instances[rid], stop_due_at=None, destroy_due_at=None), now
            ),
            now,
        )
        for rid in record_ids
        if rid in records.instances
    }
    return evolve(records, instances={**records.instances, **changed})
