"""Enrollment: which candidate becomes the worker of which slot (the seed's steps 5 and 6).

`enroll(records, request, ...)` is pure. In order, it:

1. checks the token: unknown, of another cluster, or bound to another instance than the one that
   presents it is a failed token check. The head destroys the presenting instance only when the
   request provably comes from it (its source address is the instance's public address in vast's
   latest listing, or the one it enrolled from; DESIGN.md 10) and the instance is ours; anything
   else is only refused, and noted in aggregate as unproven traffic (a stranger naming a
   worker's instance id must change nothing);
2. refuses a token already used: by the same boot it is a retry whose answer was lost (answered
   again, with a fresh certificate; the lost answer's certificate is revoked); by another boot
   it is a container restart (a second enrollment), which the seed ends: 403, and the worker
   destroys itself;
3. refuses an expired token, and a candidate whose record or request has ended (a late candidate:
   every slot already has a worker);
4. refuses a candidate whose image runs another Ray or Python than the head's, as Ray's own
   check would (`reconciler.model.rayversions.refusal`), with the reason in plain words. That is
   a permanent failure of the node type, not of the host: the first such refusal halts the node
   type (no rental until its image or env changes; `BreakerState.halt`), alerts a person, and
   destroys the node type's other candidates of the same image at once (every host would fail
   the same way). Versions the agent could not tell are let in (Ray decides then);
5. fills the request's first open slot: the record becomes a worker, the token is spent and bound
   to the boot, the rent-loop breaker count of the node type goes back to 0;
6. when that was the last open slot, closes the request and destroys every other candidate of it
   at once (not on a later tick), recording the intent before the calls.

`resume(records, identity, request, ...)` is the other way in (DESIGN.md 10, "A deliberate stop
keeps the disk"): a worker that the head stopped deliberately kept its certificate and key, and
at the first boot after the head started its instance again it presents them (mutual TLS)
instead of a join token. It is let in only for a live worker record of ours, on the instance and
with the very certificate its enrollment issued (not revoked), whose stop the head answered as
deliberate (`stopped_deliberately_at`) and whose intent the head has set back to running (the
planner's start records it before the call to vast). Its slot, request and certificate stay as
they were. The same boot asking again (its answer was lost) is answered again. Every other
restart is refused: a record still meant to be stopped, a stop that was not the head's, a
second boot after a resume; the worker reports and destroys itself, as after a refused second
enrollment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.head import decisions as dec
from reconciler.head import tokens
from reconciler.head.messages import EnrollRequest, ResumeRequest
from reconciler.head.pki import WorkerIdentity
from reconciler.model import rayversions
from reconciler.model.plan import Action
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import (
    BreakerState,
    Halt,
    InstanceRecord,
    Intent,
    JoinToken,
    Phase,
    Records,
    Request,
    RequestStatus,
    Role,
    breaker_key,
)
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerKind

VERSION_MISMATCH = "ray_version_mismatch"
RESUME_REFUSED = "resume_refused"


@dataclass(frozen=True)
class Admission:
    """A candidate let in: what the enrollment answer is built from."""

    record: InstanceRecord
    slot_id: str
    request_id: str | None
    serial: int
    again: bool = False  # the same boot asking again: a fresh certificate, nothing else changes


def enroll(
    records: Records,
    request: EnrollRequest,
    *,
    cluster: str,
    lineage: str,
    now: float,
    serial: int,
    peer: str | None = None,
    head: RayVersions | None = None,
    spec: ClusterSpec | None = None,
) -> dec.Decision[Admission]:
    """Decide one enrollment; `serial` is the serial the worker's certificate will carry, `peer`
    the request's source address (None: unknown, which proves nothing), `head` the Ray and
    Python the head runs (None: no version check), `spec` the cluster as declared now (the node
    type's image for the reason, its image and env for the halt)."""
    token = records.tokens.get(tokens.digest(request.token))
    record = records.instances.get(token.record_id) if token is not None else None
    problem = _token_problem(token, record, request, cluster=cluster, lineage=lineage)
    if problem is not None or token is None or record is None:
        why = problem or "the join token is not one this head issued"
        return _token_check_failed(
            records, request, why, cluster=cluster, lineage=lineage, now=now, peer=peer
        )
    if token.used_at is not None:
        return _used(records, request, token, record, now=now, serial=serial)
    if now >= token.expires_at:
        return _refuse(
            records,
            request,
            record,
            "token_expired",
            f"the join token expired {now - token.expires_at:.0f}s ago",
        )
    slot_request = records.requests.get(record.request_id) if record.request_id else None
    if not record.live or record.intent is not Intent.RUNNING or record.role is not Role.CANDIDATE:
        state = record.ended_reason or record.intent.value
        return _refuse(
            records,
            request,
            record,
            "late_candidate",
            f"record {record.id} is {record.phase.value} ({state})",
        )
    if slot_request is None:
        return _refuse(
            records,
            request,
            record,
            "not_a_candidate",
            f"record {record.id} belongs to no request",
        )
    if head is not None and request.runtime is not None:
        refused = rayversions.refusal(head, request.runtime)
        if refused is not None:
            return _version_mismatch(
                records, request, record, slot_request, refused, head=head, spec=spec, now=now
            )
    joinable = slot_request.status is RequestStatus.OPEN or slot_request.ended_by_watchdog
    if not joinable or not slot_request.open_slots:
        settled = f"every slot of request {slot_request.id} is settled"
        return _refuse(
            records,
            request,
            record,
            "late_candidate",
            f"{settled} ({slot_request.status.value})",
        )
    return _admit(records, request, token, record, slot_request, now=now, serial=serial, peer=peer)


def resume(
    records: Records,
    identity: WorkerIdentity | None,
    request: ResumeRequest,
    *,
    cluster: str,
    lineage: str,
    now: float,
) -> dec.Decision[Admission]:
    """Decide one resume; `identity` is what the client certificate names (None: none)."""
    record = records.instances.get(identity.record_id) if identity is not None else None
    problem = _resume_problem(records, identity, record, request, cluster=cluster, lineage=lineage)
    if problem is not None or record is None or identity is None:
        error, why = problem or ("unknown_worker", "the certificate names no worker")
        note = dec.Note(
            LedgerKind.DETECTION,
            RESUME_REFUSED,
            f"resume of instance {request.instance_id} refused ({error}): {why}",
            record=record.id if record is not None else None,
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "refused": error},
        )
        return dec.Decision(records, (note,), (), dec.Refusal(403, error, why))
    again = record.resumed_boot == request.boot_id and record.stopped_deliberately_at is None
    resumed = replace(
        record,
        phase=Phase.ENROLLED,
        self_report_at=now,
        public_ip=request.public_ip,
        stopped_deliberately_at=None,
        start_requested_at=None,
        resumed_boot=request.boot_id,
    )
    stopped_for = (
        f" after {now - record.stopped_deliberately_at:.0f}s stopped"
        if record.stopped_deliberately_at is not None
        else ""
    )
    note = dec.Note(
        LedgerKind.DECISION if not again else LedgerKind.NOTE,
        "resumed",
        f"instance {request.instance_id} resumed as the worker of slot {record.slot_id} with its "
        f"kept certificate{stopped_for}" + (" (asked again from the same boot)" if again else ""),
        record=record.id,
        instance=request.instance_id,
        data={
            "slot": record.slot_id,
            "request": record.request_id,
            "boot_id": request.boot_id,
            "public_ip": request.public_ip,
            "again": again,
        },
    )
    admission = Admission(
        resumed, record.slot_id or "", record.request_id, identity.serial, again=again
    )
    return dec.Decision(dec.put(records, resumed), (note,), (), None, admission)


def _resume_problem(
    records: Records,
    identity: WorkerIdentity | None,
    record: InstanceRecord | None,
    request: ResumeRequest,
    *,
    cluster: str,
    lineage: str,
) -> tuple[str, str] | None:
    """Why this resume is refused (error code, reason), or None to let it in."""
    if identity is None:
        return "unknown_worker", "the certificate names no worker"
    if identity.serial in records.revoked_certs:
        return "revoked", f"certificate {identity.serial:x} is revoked"
    if identity.cluster != cluster:
        return "unknown_worker", f"the certificate is of cluster {identity.cluster!r}"
    if record is None or not dec.ours(record, cluster=cluster, lineage=lineage):
        return "unknown_worker", f"record {identity.record_id} is not a worker of ours"
    if not record.live or record.intent is Intent.DESTROYED:
        ended = record.ended_reason or "destroyed"
        return "unknown_worker", f"record {record.id} has ended ({ended})"
    if (
        record.role is not Role.WORKER
        or record.vast_id != identity.instance_id
        or record.cert_serial != identity.serial
    ):
        return "unknown_worker", f"record {record.id} has no worker with this certificate"
    if request.instance_id != identity.instance_id or request.record_id != identity.record_id:
        return "unknown_worker", "the resume speaks for another instance than its certificate"
    if record.stopped_deliberately_at is None and record.resumed_boot == request.boot_id:
        return None if record.intent is Intent.RUNNING else _not_started(record)
    if record.stopped_deliberately_at is None:
        return (
            RESUME_REFUSED,
            f"instance {request.instance_id} was not stopped by the head (or has resumed "
            "already): a restarted container is not let in again",
        )
    if record.intent is not Intent.RUNNING:
        return _not_started(record)
    return None


def _not_started(record: InstanceRecord) -> tuple[str, str]:
    return (
        RESUME_REFUSED,
        f"record {record.id} is meant to be {record.intent.value}: the head has not started "
        "it again",
    )


def _token_problem(
    token: JoinToken | None,
    record: InstanceRecord | None,
    request: EnrollRequest,
    *,
    cluster: str,
    lineage: str,
) -> str | None:
    """Why a token does not prove that the presenting instance is the one it was made for."""
    if token is None or token.cluster != cluster:
        return "the join token is not one this head issued"
    if record is None or not dec.ours(record, cluster=cluster, lineage=lineage):
        return "the join token's record is not ours"
    if record.vast_id is not None and record.vast_id != request.instance_id:
        return f"the join token belongs to instance {record.vast_id} (record {record.id})"
    return None


def _admit(
    records: Records,
    request: EnrollRequest,
    token: JoinToken,
    record: InstanceRecord,
    slot_request: Request,
    *,
    now: float,
    serial: int,
    peer: str | None,
) -> dec.Decision[Admission]:
    slot = slot_request.open_slots[0]
    worker = replace(
        record,
        role=Role.WORKER,
        phase=Phase.ENROLLED,
        vast_id=request.instance_id,
        enrolled_at=now,
        self_report_at=now,
        public_ip=request.public_ip,
        slot_id=slot.id,
        cert_serial=serial,
        enrolled_from=peer,
    )
    slots = tuple(
        replace(s, worker=record.id) if s.id == slot.id else s for s in slot_request.slots
    )
    filled = not any(s.worker is None and not s.ended_without_worker for s in slots)
    closed = replace(
        slot_request, slots=slots, status=RequestStatus.FILLED if filled else slot_request.status
    )
    spent = replace(token, used_at=now, boot_id=request.boot_id)
    updated = dec.put(records, worker)
    updated = replace(
        updated,
        requests={**updated.requests, closed.id: closed},
        tokens={**updated.tokens, spent.token_hash: spent},
        breakers=_breaker_reset(updated, record),
    )
    notes = [
        dec.Note(
            LedgerKind.DECISION,
            "enrolled",
            f"instance {request.instance_id} enrolled as the worker of slot {slot.id}"
            f" ({request.cpus} CPUs from {request.cpu_source or 'unknown'}, {request.gpus} GPUs)",
            record=record.id,
            instance=request.instance_id,
            data={
                "slot": slot.id,
                "request": slot_request.id,
                "boot_id": request.boot_id,
                "public_ip": request.public_ip,
                "cpus": request.cpus,
                "gpus": request.gpus,
                **_runtime_data(request),
            },
        )
    ]
    destroys: list[Action] = []
    if filled:
        updated, extra_notes, destroys = _end_extras(updated, closed, keep=record.id, now=now)
        notes += extra_notes
    admission = Admission(worker, slot.id, slot_request.id, serial)
    return dec.Decision(updated, tuple(notes), tuple(destroys), None, admission)


def _runtime_data(request: EnrollRequest) -> dict[str, str | None]:
    """What the ledger keeps of the image's versions (nothing from an agent that did not say)."""
    runtime = request.runtime
    if runtime is None:
        return {}
    return {
        "ray_version": runtime.ray,
        "python_version": runtime.python,
        "python_version_match_level": runtime.python_match_level,
        "runtime_source": request.runtime_source,
    }


def _version_mismatch(
    records: Records,
    request: EnrollRequest,
    record: InstanceRecord,
    slot_request: Request,
    why: str,
    *,
    head: RayVersions,
    spec: ClusterSpec | None,
    now: float,
) -> dec.Decision[Admission]:
    """Refuse a candidate whose image's Ray or Python the head's Ray refuses; the first one of a
    node type's image halts the node type and ends its other candidates of that image."""
    assert request.runtime is not None
    node_type = spec.node_types.get(record.node_type) if spec is not None else None
    image = slot_request.image or (node_type.image if node_type else None) or "of unknown name"
    fingerprint = slot_request.fingerprint or (node_type.ray_fingerprint if node_type else "")
    reason = f"image {image} has {request.runtime.says()}, the head runs {head.says()}"
    message = f"{reason}: {why}"
    key = breaker_key(record.cluster, record.node_type)
    state = records.breakers.get(key, BreakerState())
    data: dict[str, object] = {
        "boot_id": request.boot_id,
        "refused": VERSION_MISMATCH,
        "image": image,
        "head_ray_version": head.ray,
        "head_python_version": head.python,
        **_runtime_data(request),
    }
    refusal = dec.Refusal(403, VERSION_MISMATCH, message)
    if state.halted(fingerprint):
        note = dec.Note(
            LedgerKind.NOTE,
            VERSION_MISMATCH,
            f"enrollment of instance {request.instance_id} refused ({VERSION_MISMATCH}): "
            f"{message}; node type {record.node_type} is halted already",
            record=record.id,
            instance=request.instance_id,
            data=data,
        )
        return dec.Decision(records, (note,), (), refusal)
    halt = Halt(now, VERSION_MISMATCH, message, image, fingerprint, record.id)
    updated = replace(records, breakers={**records.breakers, key: replace(state, halt=halt)})
    destroys: list[Action] = []
    for other in list(updated.instances.values()):
        if not _same_image(updated, other, record, fingerprint):
            continue
        detail = f"node type {record.node_type} is halted: {message}"
        updated = dec.put(updated, dec.doomed(other, VERSION_MISMATCH, now))
        destroys.append(dec.destroy(other, VERSION_MISMATCH, detail))
    ended = f"; {len(destroys)} other candidate(s) of it destroyed" if destroys else ""
    note = dec.Note(
        LedgerKind.DETECTION,
        VERSION_MISMATCH,
        f"enrollment of instance {request.instance_id} refused ({VERSION_MISMATCH}): {message}. "
        f"Node type {record.node_type} is halted: no rental until its image or env changes "
        f"(every host would fail the same way){ended}",
        record=record.id,
        instance=request.instance_id,
        data={**data, "halted": record.node_type, "destroyed": [a.record for a in destroys]},
    )
    return dec.Decision(updated, (note,), tuple(destroys), refusal)


def _same_image(
    records: Records, other: InstanceRecord, refused: InstanceRecord, fingerprint: str
) -> bool:
    """A live candidate of the refused one's node type (not itself) rented for the same image
    and env: it would be refused the same way."""
    if (
        other.id == refused.id
        or other.cluster != refused.cluster
        or other.node_type != refused.node_type
        or other.managed_by != refused.managed_by
        or other.role is not Role.CANDIDATE
        or not other.live
        or other.intent is Intent.DESTROYED
    ):
        return False
    request = records.requests.get(other.request_id) if other.request_id else None
    theirs = request.fingerprint if request is not None else None
    return theirs is None or theirs == fingerprint


def _end_extras(
    records: Records, request: Request, *, keep: str, now: float
) -> tuple[Records, list[dec.Note], list[Action]]:
    """Every other live candidate of a request whose slots are all filled: destroyed at once."""
    notes: list[dec.Note] = []
    destroys: list[Action] = []
    for other in list(records.instances.values()):
        if (
            other.id == keep
            or other.request_id != request.id
            or other.role is not Role.CANDIDATE
            or not other.live
            or other.intent is Intent.DESTROYED
        ):
            continue
        message = f"request {request.id} has a worker in every slot"
        records = dec.put(records, dec.doomed(other, "extra_candidate", now))
        destroys.append(dec.destroy(other, "extra_candidate", message))
    return records, notes, destroys


def _used(
    records: Records,
    request: EnrollRequest,
    token: JoinToken,
    record: InstanceRecord,
    *,
    now: float,
    serial: int,
) -> dec.Decision[Admission]:
    same_boot = token.boot_id == request.boot_id
    if same_boot and record.role is Role.WORKER and record.live and record.intent is Intent.RUNNING:
        # the answer that was lost carried a certificate nobody holds now: it is revoked
        lost = record.cert_serial
        note = dec.Note(
            LedgerKind.NOTE,
            "enrolled",
            f"instance {request.instance_id} asked again from the same boot; answered again"
            + (f" (certificate {lost:x} of the lost answer revoked)" if lost is not None else ""),
            record=record.id,
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "again": True},
        )
        renewed = replace(record, cert_serial=serial)
        updated = dec.put(records, renewed)
        if lost is not None:
            updated = dec.revoke(updated, lost)
        admission = Admission(renewed, record.slot_id or "", record.request_id, serial, again=True)
        return dec.Decision(updated, (note,), (), None, admission)
    if record.enrolled_at is not None:
        return _refuse(
            records,
            request,
            record,
            "second_enrollment",
            f"instance {request.instance_id} enrolled at {record.enrolled_at:.0f} from"
            " another boot; a restarted container is not let in again",
        )
    return _refuse(records, request, record, "token_reused", "the join token was already used")


def _token_check_failed(
    records: Records,
    request: EnrollRequest,
    why: str,
    *,
    cluster: str,
    lineage: str,
    now: float,
    peer: str | None,
) -> dec.Decision[Admission]:
    """The seed: a failed token check makes the head destroy that instance, when the request
    provably comes from it and it is ours; otherwise 403 and nothing else changes."""
    presenter = dec.by_vast_id(records, request.instance_id)
    # the ledger keeps why; the sender learns only that it failed (the reason names instances
    # and records, which is nothing to tell a stranger)
    refusal = dec.Refusal(403, "token_check_failed", "token check failed")
    why = f"token check failed: {why}"
    ours = (
        presenter is not None
        and dec.ours(presenter, cluster=cluster, lineage=lineage)
        and presenter.intent is not Intent.DESTROYED
    )
    if presenter is None or not ours:
        what = (
            "not an instance of ours"
            if presenter is None or not dec.ours(presenter, cluster=cluster, lineage=lineage)
            else "an instance of ours that has ended"
        )
        note = dec.Note(
            LedgerKind.DETECTION,
            "token_check_failed",
            f"instance {request.instance_id}: {why}; {what}, refused",
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "refused": "token_check_failed", "unproven": True},
        )
        return dec.Decision(records, (note,), (), refusal)
    if not dec.comes_from(presenter, peer):
        note = dec.Note(
            LedgerKind.DETECTION,
            "token_check_failed",
            f"instance {request.instance_id}: {why}; from "
            f"{peer or 'an unknown address'}, not the instance's address "
            f"({presenter.listed_ip or presenter.enrolled_from or 'none'}): refused, nothing "
            "changed",
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "refused": "token_check_failed", "unproven": True},
        )
        return dec.Decision(records, (note,), (), refusal)
    message = f"instance {request.instance_id}: {why} (from its own address {peer})"
    updated = dec.put(records, dec.doomed(presenter, "token_check_failed", now))
    if presenter.cert_serial is not None:
        updated = dec.revoke(updated, presenter.cert_serial)
    notes = (
        dec.Note(
            LedgerKind.DETECTION,
            "token_check_failed",
            message,
            record=presenter.id,
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "refused": "token_check_failed", "peer": peer},
        ),
    )
    destroy = dec.destroy(presenter, "token_check_failed", "the token check failed")
    return dec.Decision(updated, notes, (destroy,), refusal)


def _refuse(
    records: Records,
    request: EnrollRequest,
    record: InstanceRecord,
    error: str,
    message: str,
    *,
    status: int = 403,
) -> dec.Decision[Admission]:
    note = dec.Note(
        LedgerKind.DETECTION,
        _LEDGER_CLASS[error],
        f"enrollment of instance {request.instance_id} refused ({error}): {message}",
        record=record.id,
        instance=request.instance_id,
        data={"boot_id": request.boot_id, "refused": error},
    )
    return dec.Decision(records, (note,), (), dec.Refusal(status, error, message))


# Refusal codes and the ledger classes they are kept under (reconciler/model/routing.py).
_LEDGER_CLASS = {
    "late_candidate": "late_candidate",
    "second_enrollment": "second_enrollment",
    "token_reused": "token_reused",
    "token_expired": "token_expired",
    "not_a_candidate": "late_candidate",
}


def _breaker_reset(records: Records, record: InstanceRecord) -> dict[str, BreakerState]:
    """The seed: a successful enrollment sets the rent-loop breaker's count to 0."""
    key = breaker_key(record.cluster, record.node_type)
    breakers = dict(records.breakers)
    state = breakers.get(key, BreakerState())
    breakers[key] = replace(state, consecutive_empty=0)
    return breakers
