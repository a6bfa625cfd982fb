"""The money chain: the idle scanner, auto-stop and auto-destroy (30 s cadence each).

The scanner reads a short live utilisation sample per machine (`busy`: the agent's sample and
Ray's view of the node, either one showing work is traffic, `traffic`; None when there is no
sample). The windows are the node type's own where it declares them, else the cluster's. Quiet
arms both timers together; the stop timer falls due first, so the reversible action comes
first. Any traffic clears both timers, with no condition at all: whatever the recorded state,
phase, intent or ownership, an observed sample of work clears them (DESIGN.md rule 2). Arming
and acting are gated; clearing never is.

A lost worker is neither armed nor acted on (DESIGN.md 11, "lost never ends a machine"): no
channel hears it, so its quiet is not observed (Ray reports no work on a node it cannot see),
its traffic could not clear a timer, and a stop it cannot hear of ends as a destroy. It is not
counted toward min_workers either: it is out of rotation. If its reports stay away, went-silent
ends it at its own threshold.

The stop of a worker with an agent is a handshake (DESIGN.md 11, `model.stopping`): auto-stop
first asks (the plan records intent stopped; the heartbeat answers say "stop pending"), and once
the agent has acknowledged it finds the worker again as `idle_stop`, which the controller drains
through Ray and stops; without an acknowledgment in time, as `stop_unacknowledged`, stopped
without the drain. Traffic or a pin before vast's stop is called calls the stop off.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import replace

from reconciler.model import stopping
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.stretches import open_since, traffic_again, went_quiet
from reconciler.nets.base import NetResult, Specs, serving_workers
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal

STOP = "idle_stop"
DESTROY = "idle_destroy"
LOST = "lost"  # the refusal of a lost worker: out of rotation, never ended by the money chain


def traffic(ray: bool | None, agent: bool | None, *, ray_reads: bool) -> bool | None:
    """One verdict from the two sources of a machine (DESIGN.md 5): Ray's view of its node
    (leased resources, actors, placement-group bundles) and the agent's live sample (GPU, the
    container's CPU, network). Either one showing work is traffic. Quiet needs Ray's word where
    Ray is read: an idle actor holding state uses no CPU, so a quiet sample alone does not make
    a node of a Ray-read cluster quiet while its Ray view is unknown. Where Ray is not read (no
    reader for the cluster) the sample decides; None is "no sample", never "quiet"."""
    if ray or agent:
        return True
    return ray if ray_reads else agent


def traffic_by_record(
    ray: Mapping[str, bool | None],
    agents: Mapping[str, bool | None],
    ray_reads: Container[str],
) -> dict[str, bool | None]:
    """`traffic` per record; `ray_reads`: the records whose cluster's Ray is read."""
    return {
        rid: traffic(ray.get(rid), agents.get(rid), ray_reads=rid in ray_reads)
        for rid in set(ray) | set(agents)
    }


def scan(
    records: Iterable[InstanceRecord],
    specs: Specs,
    *,
    busy: Mapping[str, bool | None],
    lineage: str,
    now: float,
) -> NetResult:
    everything = list(records)
    result = clear(everything, busy=busy, now=now)
    for record in serving_workers(everything):  # arming: gated
        spec = specs.get(record.cluster)
        if spec is None or record.id in result.updates or busy.get(record.id) is not False:
            continue
        if record.managed_by != lineage or record.held(now) or record.stop_due_at is not None:
            continue
        if record.lost:
            continue
        stop_after, destroy_after = spec.idle_windows(record.node_type)
        timed = replace(record, stop_due_at=now + stop_after, destroy_due_at=now + destroy_after)
        result.updates[record.id] = went_quiet(timed, now)
    for record in _stopped_untimed(everything, lineage, now):
        spec = specs.get(record.cluster)
        if spec is None or record.id in result.updates or busy.get(record.id):
            continue
        stop_after, destroy_after = spec.idle_windows(record.node_type)
        result.updates[record.id] = replace(record, destroy_due_at=now + destroy_after - stop_after)
    return result


def _stopped_untimed(
    records: Iterable[InstanceRecord], lineage: str, now: float
) -> list[InstanceRecord]:
    """Our stopped workers with no destroy timer: traffic read after vast's stop was called
    (a last sample of the stopping container) cleared it, and a stopped disk would bill with
    nothing to end it. The destroy timer is armed again behind the stop, as if the stop had
    fallen due now; traffic or a pin still holds it, as any timer."""
    return [
        r
        for r in records
        if r.live
        and r.role is Role.WORKER
        and r.intent is Intent.STOPPED
        and r.phase is Phase.STOPPED
        and r.destroy_due_at is None
        and r.managed_by == lineage
        and not r.held(now)
    ]


def clear(
    records: Iterable[InstanceRecord], *, busy: Mapping[str, bool | None], now: float
) -> NetResult:
    """The scanner's clearing half, with no gate: traffic clears both timers of every record.
    It runs on every pass of the money chain, not only at the scanner's cadence, so a stop or a
    destroy never falls due on a sample of work the pass has already read (the heartbeat that
    acknowledges a stop may carry one: issue 21's e2e run stopped a busy worker on it, and the
    next scan left the stopped machine with no destroy timer)."""
    result = NetResult()
    for record in records:
        armed = record.stop_due_at or record.destroy_due_at or open_since(record.quiet)
        if busy.get(record.id) and armed:
            cleared = replace(record, stop_due_at=None, destroy_due_at=None)
            # a stop vast has not been asked for yet is called off too (the agent is told)
            result.updates[record.id] = traffic_again(stopping.cancelled(cleared, now), now)
            if stopping.in_handshake(record):
                why = "traffic before vast's stop: the stop is called off"
                result.detections.append(
                    Detection(record.id, stopping.CANCELLED_CLASS, why, record.vast_id)
                )
    return result


def auto_stop(
    records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float
) -> NetResult:
    result = NetResult()
    everything = list(records)
    workers = serving_workers(everything)
    for record in workers:
        spec = specs.get(record.cluster)
        interval = float(spec.watchdogs.heartbeat_interval_seconds) if spec else 30.0
        ask = stopping.ask_at(record, interval)
        if ask is None or ask > now:
            continue
        if _refused(record, workers, specs, result, running=True, lineage=lineage, now=now):
            continue
        result.detections.append(
            Detection(record.id, STOP, "quiet past the stop timer", record.vast_id)
        )
    for record in everything:
        if stopping.in_handshake(record) and record.managed_by == lineage:
            _handshake(record, specs, result, now)
    return result


def _handshake(record: InstanceRecord, specs: Specs, result: NetResult, now: float) -> None:
    """A stop asked of the agent: called off if work holds the machine now; stopped (drained
    first) once acknowledged; stopped without the drain once the acknowledgment is overdue."""
    spec = specs.get(record.cluster)
    if spec is None:
        return
    if record.held(now):
        result.updates[record.id] = stopping.cancelled(record, now)
        why = "work holds it (Ray's or a person's pin) before vast's stop: the stop is called off"
        result.detections.append(
            Detection(record.id, stopping.CANCELLED_CLASS, why, record.vast_id)
        )
        return
    if stopping.acknowledged(record):
        if record.stop_due_at is not None and now < record.stop_due_at:
            return  # asked ahead of the timer: the stop is called when it falls due
        why = "quiet past the stop timer; the agent acknowledged the stop"
        result.detections.append(Detection(record.id, STOP, why, record.vast_id))
        return
    interval = float(spec.watchdogs.heartbeat_interval_seconds)
    deadline = stopping.ack_deadline(record, interval)
    if deadline is not None and now >= deadline:
        asked = record.stop_asked_at if record.stop_asked_at is not None else now
        why = (
            f"the agent did not acknowledge the stop within {now - asked:.0f}s: stopped "
            "without the drain (Ray runs until the TERM, whose report keeps the disk)"
        )
        result.detections.append(Detection(record.id, stopping.UNACKNOWLEDGED, why, record.vast_id))


def auto_destroy(
    records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float
) -> NetResult:
    result = NetResult()
    everything = [r for r in records if r.live and r.intent is not Intent.DESTROYED]
    workers = serving_workers(everything)
    for record in everything:
        if record.destroy_due_at is None or record.destroy_due_at > now:
            continue
        stopped = record.phase in (Phase.STOPPED, Phase.STOPPING) or record.intent is Intent.STOPPED
        idle = record.stop_due_at is not None
        if not (stopped or idle):
            continue
        running = not stopped
        if _refused(record, workers, specs, result, running=running, lineage=lineage, now=now):
            continue
        result.detections.append(
            Detection(record.id, DESTROY, "quiet past the destroy timer", record.vast_id)
        )
    return result


def _refused(
    record: InstanceRecord,
    workers: list[InstanceRecord],
    specs: Specs,
    result: NetResult,
    *,
    running: bool,
    lineage: str,
    now: float,
) -> bool:
    """The money chain's gates, in order, for both of its acting nets: a lost running worker is
    never ended by it; then the reaper's gates; then a running worker at min_workers stays. The
    refusal is noted for the log."""
    if record.lost and running:
        gate = LOST
    else:
        why = refusal(record, lineage=lineage, now=now, gate=Gate())
        if why is not None:
            gate = why.value
        elif running and at_minimum(record, _staying(workers, result), specs):
            gate = "at-min-workers"
        else:
            return False
    result.refusals.append((record.id, gate))
    return True


def _staying(workers: list[InstanceRecord], result: NetResult) -> list[InstanceRecord]:
    """The workers this pass has not already decided to end: two quiet workers due in the same
    pass must not both go when only one may (min_workers)."""
    ending = {d.record for d in result.detections}
    return [w for w in workers if w.id not in ending]


def at_minimum(record: InstanceRecord, workers: list[InstanceRecord], specs: Specs) -> bool:
    """Stopping this one would take its node type under min_workers (`workers`: the serving
    workers, of which the lost ones are not in rotation; `status` says so of a quiet worker the
    money chain will keep)."""
    spec = specs.get(record.cluster)
    if spec is None or record.node_type not in spec.node_types:
        return False
    same = [
        w
        for w in workers
        if w.cluster == record.cluster
        and w.node_type == record.node_type
        and (w.id == record.id or not w.lost)
    ]
    return len(same) <= spec.node_types[record.node_type].min_workers
