"""Heartbeats: is this certificate's holder a worker here? (pure)

The TLS layer has already checked that the certificate was signed by this cluster's CA. What is
left is whether the worker it names is still one: not revoked, a live worker record of ours, with
the same vast instance, and a heartbeat that speaks for the instance its certificate names. Any
other answer is 403 ("you are not a worker here": the worker reports and destroys itself), the
certificate's serial joins the revocation set, and the refusal is kept in the ledger.

A heartbeat that passes moves the worker's own report clock (`self_report_at`, the only thing the
went-silent net reads) and, once Ray runs, its phase from enrolled to serving. One that moves
nothing but the clocks says so (`clocks_only`): the head keeps it in memory and writes it within
seconds, not at once (a save writes the whole state; at 1,000 workers heartbeats come 33 a
second). It also carries the money chain's stop handshake (DESIGN.md 11, `model.stopping`): the
answer says "stop": "pending" while a stop is under way and "cancelled" after one was called
off, and the agent's acknowledgment is kept on the record (`stop_acked_at`), which lets the
controller drain the node and call vast's stop.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.head import decisions as dec
from reconciler.head.messages import Heartbeat
from reconciler.head.pki import WorkerIdentity
from reconciler.model import stopping
from reconciler.model.evolve import evolve
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.state.ledger import LedgerKind

# Traffic thresholds: above Ray's own background (health checks, resource reports, heartbeats).
CPU_BUSY = 0.10
GPU_BUSY = 0.05
NET_BUSY_BYTES_PER_SECOND = 64 * 1024


@dataclass(frozen=True)
class Taken:
    """A heartbeat that passed: the worker's record as it is now, and what the answer says of
    the money chain's stop ("pending", "cancelled", or None: nothing)."""

    record: InstanceRecord
    stop: str | None = None


def heartbeat(
    records: Records,
    identity: WorkerIdentity | None,
    beat: Heartbeat,
    *,
    cluster: str,
    lineage: str,
    now: float,
) -> dec.Decision[Taken]:
    if identity is None:
        return _refuse(records, None, beat, "unknown_worker", "the certificate names no worker")
    record = records.instances.get(identity.record_id)
    problem = _problem(records, identity, record, beat, cluster=cluster, lineage=lineage)
    if problem is not None or record is None:
        error, why = problem or ("unknown_worker", "no such worker")
        refused = _refuse(records, identity, beat, error, why)
        return evolve(refused, records=dec.revoke(records, identity.serial))
    serving = record.phase is Phase.ENROLLED and beat.ray.state == "running"
    clocks = evolve(record, self_report_at=now, sample_at=now, sample_busy=busy(beat))
    updated = clocks.serving(now) if serving else clocks
    updated = stopping.heard(updated, beat.stop_acknowledged, now)
    notes: list[dec.Note] = []
    if serving:
        notes.append(
            dec.Note(
                LedgerKind.NOTE,
                "serving",
                f"instance {record.vast_id}: Ray is running on the worker of slot {record.slot_id}",
                record=record.id,
                instance=record.vast_id,
                data={"ray_pid": beat.ray.pid},
            )
        )
    if updated.stop_acked_at is not None and record.stop_acked_at is None:
        notes.append(_acknowledged(updated, now))
    taken = Taken(updated, stopping.answer(record))
    only = updated is clocks and not notes  # nothing but the clocks moved
    return dec.Decision(dec.put(records, updated), tuple(notes), (), None, taken, only)


def _acknowledged(record: InstanceRecord, now: float) -> dec.Note:
    asked = record.stop_asked_at if record.stop_asked_at is not None else now
    return dec.Note(
        LedgerKind.NOTE,
        stopping.ACKED_CLASS,
        f"instance {record.vast_id}: the agent acknowledged the stop {now - asked:.0f}s after "
        "it was asked: its Ray's exit is part of the stop; the node is drained, then stopped",
        record=record.id,
        instance=record.vast_id,
        data={"asked_at": asked},
    )


def busy(beat: Heartbeat) -> bool:
    """Whether a sample shows traffic (DESIGN.md: GPU or CPU utilisation or network bytes above a
    small threshold; any one of them is enough). The CPU figure is the container's own (its
    cgroup), so a busy neighbour on the host is not our traffic. GPU memory counts by its
    activity, not its occupancy: an idle Ray worker process keeps the memory its last task's
    framework cached, and a kept allocation would hold a quiet machine's bill open forever."""
    gpu = max(beat.gpu_fraction or 0.0, beat.gpu_memory_activity or 0.0)
    if (beat.cpu_fraction or 0.0) >= CPU_BUSY or gpu >= GPU_BUSY:
        return True
    seconds = beat.sample_seconds
    if not seconds:
        return False
    moved = (beat.net_rx_bytes or 0) + (beat.net_tx_bytes or 0)
    return moved / seconds >= NET_BUSY_BYTES_PER_SECOND


def holder_problem(
    records: Records,
    identity: WorkerIdentity,
    record: InstanceRecord | None,
    *,
    cluster: str,
    lineage: str,
) -> tuple[str, str] | None:
    """Why the holder of a certificate this cluster's CA signed is no longer a worker here (error
    code, reason), or None: its serial is revoked, it is of another cluster, the record it names
    is not ours or has ended. A heartbeat and a resume (`enrollment.resume`) both ask this first,
    then check the record's worker against the certificate in their own terms."""
    if identity.serial in records.revoked_certs:
        return "revoked", f"certificate {identity.serial:x} is revoked"
    if identity.cluster != cluster:
        return "unknown_worker", f"the certificate is of cluster {identity.cluster!r}"
    if record is None or not dec.ours(record, cluster=cluster, lineage=lineage):
        return "unknown_worker", f"record {identity.record_id} is not a worker of ours"
    if not record.live or record.intent is Intent.DESTROYED:
        return (
            "unknown_worker",
            f"record {record.id} has ended ({record.ended_reason or 'destroyed'})",
        )
    return None


def _problem(
    records: Records,
    identity: WorkerIdentity,
    record: InstanceRecord | None,
    beat: Heartbeat,
    *,
    cluster: str,
    lineage: str,
) -> tuple[str, str] | None:
    holder = holder_problem(records, identity, record, cluster=cluster, lineage=lineage)
    if holder is not None or record is None:
        return holder or ("unknown_worker", f"record {identity.record_id} is not a worker of ours")
    if record.role is not Role.WORKER or record.vast_id != identity.instance_id:
        return (
            "unknown_worker",
            f"record {record.id} has no worker on instance {identity.instance_id}",
        )
    if beat.instance_id != identity.instance_id or beat.record_id != identity.record_id:
        return "unknown_worker", "the heartbeat speaks for another instance than its certificate"
    return None


def _refuse(
    records: Records,
    identity: WorkerIdentity | None,
    beat: Heartbeat,
    error: str,
    why: str,
) -> dec.Decision[Taken]:
    instance = identity.instance_id if identity is not None else beat.instance_id
    note = dec.Note(
        LedgerKind.DETECTION,
        "heartbeat_refused",
        f"heartbeat of instance {instance} refused ({error}): {why}",
        record=identity.record_id if identity is not None else None,
        instance=instance,
        data={
            "refused": error,
            "serial": f"{identity.serial:x}" if identity is not None else None,
            "boot_id": beat.boot_id,
        },
    )
    return dec.Decision(records, (note,), (), dec.Refusal(403, error, why))
