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

The refusals that do more than answer (a failed token check, a version mismatch) are built in
`head/enrollment_refusals.py`; the checks a resume shares with a heartbeat (is the certificate's
holder still a worker of ours?) are `heartbeats.holder_problem`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reconciler.head import decisions as dec
from reconciler.head import tokens
from reconciler.head.enrollment_refusals import (
    refuse,
    runtime_data,
    token_check_failed,
    version_mismatch,
)
from reconciler.head.heartbeats import holder_problem
from reconciler.head.messages import EnrollRequest, ResumeRequest
from reconciler.head.pki import WorkerIdentity
from reconciler.model import rayversions
from reconciler.model.plan import Action
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import (
    BreakerState,
    InstanceRecord,
    Intent,
    JoinToken,
    Records,
    Role,
    breaker_key,
)
from reconciler.model.requestrecord import Request, RequestStatus, Slot
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerKind

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
        return token_check_failed(
            records, request, why, cluster=cluster, lineage=lineage, now=now, peer=peer
        )
    if token.used_at is not None:
        return _used(records, request, token, record, now=now, serial=serial)
    slot_request = records.requests.get(record.request_id) if record.request_id else None
    refused = _candidate_problem(token, record, slot_request, now=now)
    if refused is not None or slot_request is None:
        error, why = refused or ("not_a_candidate", f"record {record.id} belongs to no request")
        return refuse(records, request, record, error, why)
    if head is not None and request.runtime is not None:
        why_not = rayversions.refusal(head, request.runtime)
        if why_not is not None:
            return version_mismatch(
                records, request, record, slot_request, why_not, head=head, spec=spec, now=now
            )
    joinable = slot_request.status is RequestStatus.OPEN or slot_request.ended_by_watchdog
    if not joinable or not slot_request.open_slots:
        settled = f"every slot of request {slot_request.id} is settled"
        why = f"{settled} ({slot_request.status.value})"
        return refuse(records, request, record, "late_candidate", why)
    return _admit(records, request, token, record, slot_request, now=now, serial=serial, peer=peer)


def _candidate_problem(
    token: JoinToken, record: InstanceRecord, slot_request: Request | None, *, now: float
) -> tuple[str, str] | None:
    """Why a fresh token's record may not take a slot, before its versions are read (error code,
    reason): the token has expired, the record has ended or is no candidate, or it belongs to no
    request."""
    if now >= token.expires_at:
        return "token_expired", f"the join token expired {now - token.expires_at:.0f}s ago"
    if not record.live or record.intent is not Intent.RUNNING or record.role is not Role.CANDIDATE:
        state = record.ended_reason or record.intent.value
        return "late_candidate", f"record {record.id} is {record.phase.value} ({state})"
    if slot_request is None:
        return "not_a_candidate", f"record {record.id} belongs to no request"
    return None


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
    resumed = record.enrolled(
        now,
        public_ip=request.public_ip,
        stopped_deliberately_at=None,
        start_requested_at=None,
        resumed_boot=request.boot_id,
    )
    note = _resumed_note(record, request, again=again, now=now)
    admission = Admission(
        resumed, record.slot_id or "", record.request_id, identity.serial, again=again
    )
    return dec.Decision(dec.put(records, resumed), (note,), (), None, admission)


def _resumed_note(
    record: InstanceRecord, request: ResumeRequest, *, again: bool, now: float
) -> dec.Note:
    """The ledger line of a resume let in (`record` as it was before)."""
    stopped_for = (
        f" after {now - record.stopped_deliberately_at:.0f}s stopped"
        if record.stopped_deliberately_at is not None
        else ""
    )
    return dec.Note(
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
    holder = holder_problem(records, identity, record, cluster=cluster, lineage=lineage)
    if holder is not None or record is None:
        return holder or ("unknown_worker", f"record {identity.record_id} is not a worker of ours")
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
    worker = record.enrolled(
        now,
        role=Role.WORKER,
        vast_id=request.instance_id,
        enrolled_at=now,
        public_ip=request.public_ip,
        slot_id=slot.id,
        cert_serial=serial,
        enrolled_from=peer,
    )
    closed, filled = _filled(slot_request, slot, record.id)
    spent = replace(token, used_at=now, boot_id=request.boot_id)
    updated = dec.put(records, worker)
    updated = replace(
        updated,
        requests={**updated.requests, closed.id: closed},
        tokens={**updated.tokens, spent.token_hash: spent},
        breakers=_breaker_reset(updated, record),
    )
    notes = [_enrolled_note(request, record, slot, slot_request)]
    destroys: list[Action] = []
    if filled:
        updated, extra_notes, destroys = _end_extras(updated, closed, keep=record.id, now=now)
        notes += extra_notes
    admission = Admission(worker, slot.id, slot_request.id, serial)
    return dec.Decision(updated, tuple(notes), tuple(destroys), None, admission)


def _filled(slot_request: Request, slot: Slot, worker: str) -> tuple[Request, bool]:
    """The request with `worker` in `slot`, and whether that filled it (then it is closed)."""
    slots = tuple(replace(s, worker=worker) if s.id == slot.id else s for s in slot_request.slots)
    filled = not any(s.worker is None and not s.ended_without_worker for s in slots)
    status = RequestStatus.FILLED if filled else slot_request.status
    return replace(slot_request, slots=slots, status=status), filled


def _enrolled_note(
    request: EnrollRequest, record: InstanceRecord, slot: Slot, slot_request: Request
) -> dec.Note:
    return dec.Note(
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
            **runtime_data(request),
        },
    )


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
        return refuse(
            records,
            request,
            record,
            "second_enrollment",
            f"instance {request.instance_id} enrolled at {record.enrolled_at:.0f} from"
            " another boot; a restarted container is not let in again",
        )
    return refuse(records, request, record, "token_reused", "the join token was already used")


def _breaker_reset(records: Records, record: InstanceRecord) -> dict[str, BreakerState]:
    """The seed: a successful enrollment sets the rent-loop breaker's count to 0."""
    key = breaker_key(record.cluster, record.node_type)
    breakers = dict(records.breakers)
    state = breakers.get(key, BreakerState())
    breakers[key] = replace(state, consecutive_empty=0)
    return breakers
