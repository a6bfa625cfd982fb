"""The enrollments the head refuses, and what a refusal does besides answering 403 (pure).

`enrollment.enroll` decides whether a candidate is let in; this module builds the decision when it
is not, since most refusals are more than an answer:

- a failed token check (`token_check_failed`) destroys the presenting instance, but only when the
  request provably comes from it and it is ours (DESIGN.md 10); anything else is only refused, and
  the note says it is unproven, so a stranger naming a worker's instance id changes nothing;
- a Ray or Python the head's Ray refuses (`version_mismatch`) halts the node type at its first
  such candidate and ends its other candidates of the same image: every host would fail the same
  way;
- every other refusal (`refuse`: late, expired, reused, a second enrollment) is a note and an
  answer, under the ledger class its code is routed by.

Each note says why in plain words: the ledger keeps what the sender is not told.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from reconciler.head import decisions as dec
from reconciler.head.messages import EnrollRequest
from reconciler.model.plan import Action
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import (
    BreakerState,
    Halt,
    InstanceRecord,
    Intent,
    Records,
    Role,
    breaker_key,
)
from reconciler.model.requestrecord import Request
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerKind

# A refusal carries no outcome: its decision fits whatever the caller's carries when it lets in.
T = TypeVar("T")

VERSION_MISMATCH = "ray_version_mismatch"
TOKEN_CHECK_FAILED = "token_check_failed"  # noqa: S105 - a refusal code, not a token

# Refusal codes and the ledger classes they are kept under (reconciler/model/routing.py).
_LEDGER_CLASS = {
    "late_candidate": "late_candidate",
    "second_enrollment": "second_enrollment",
    "token_reused": "token_reused",
    "token_expired": "token_expired",
    "not_a_candidate": "late_candidate",
}


def refuse(
    records: Records,
    request: EnrollRequest,
    record: InstanceRecord,
    error: str,
    message: str,
    *,
    status: int = 403,
) -> dec.Decision[T]:
    """A refusal that changes nothing: its note, and the answer."""
    note = dec.Note(
        LedgerKind.DETECTION,
        _LEDGER_CLASS[error],
        f"enrollment of instance {request.instance_id} refused ({error}): {message}",
        record=record.id,
        instance=request.instance_id,
        data={"boot_id": request.boot_id, "refused": error},
    )
    return dec.Decision(records, (note,), (), dec.Refusal(status, error, message))


def runtime_data(request: EnrollRequest) -> dict[str, str | None]:
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


# --- a failed token check ------------------------------------------------------------------------


def token_check_failed(
    records: Records,
    request: EnrollRequest,
    why: str,
    *,
    cluster: str,
    lineage: str,
    now: float,
    peer: str | None,
) -> dec.Decision[T]:
    """The seed: a failed token check makes the head destroy that instance, when the request
    provably comes from it and it is ours; otherwise 403 and nothing else changes."""
    presenter = dec.by_vast_id(records, request.instance_id)
    # the ledger keeps why; the sender learns only that it failed (the reason names instances
    # and records, which is nothing to tell a stranger)
    refusal = dec.Refusal(403, TOKEN_CHECK_FAILED, "token check failed")
    why = f"token check failed: {why}"
    unproven = _unproven(presenter, peer, cluster=cluster, lineage=lineage)
    if unproven is not None or presenter is None:
        note = dec.Note(
            LedgerKind.DETECTION,
            TOKEN_CHECK_FAILED,
            f"instance {request.instance_id}: {why}; {unproven}",
            instance=request.instance_id,
            data={"boot_id": request.boot_id, "refused": TOKEN_CHECK_FAILED, "unproven": True},
        )
        return dec.Decision(records, (note,), (), refusal)
    message = f"instance {request.instance_id}: {why} (from its own address {peer})"
    updated = dec.put(records, dec.doomed(presenter, TOKEN_CHECK_FAILED, now))
    if presenter.cert_serial is not None:
        updated = dec.revoke(updated, presenter.cert_serial)
    note = dec.Note(
        LedgerKind.DETECTION,
        TOKEN_CHECK_FAILED,
        message,
        record=presenter.id,
        instance=request.instance_id,
        data={"boot_id": request.boot_id, "refused": TOKEN_CHECK_FAILED, "peer": peer},
    )
    destroy = dec.destroy(presenter, TOKEN_CHECK_FAILED, "the token check failed")
    return dec.Decision(updated, (note,), (destroy,), refusal)


def _unproven(
    presenter: InstanceRecord | None, peer: str | None, *, cluster: str, lineage: str
) -> str | None:
    """Why a failed token check may not end the presenting instance (None: it may): it is not
    ours, it has ended, or the request does not provably come from it."""
    if presenter is None or not dec.ours(presenter, cluster=cluster, lineage=lineage):
        return "not an instance of ours, refused"
    if presenter.intent is Intent.DESTROYED:
        return "an instance of ours that has ended, refused"
    if not dec.comes_from(presenter, peer):
        return (
            f"from {peer or 'an unknown address'}, not the instance's address "
            f"({presenter.listed_ip or presenter.enrolled_from or 'none'}): refused, nothing "
            "changed"
        )
    return None


# --- a Ray or Python the head's Ray refuses ------------------------------------------------------


def version_mismatch(
    records: Records,
    request: EnrollRequest,
    record: InstanceRecord,
    slot_request: Request,
    why: str,
    *,
    head: RayVersions,
    spec: ClusterSpec | None,
    now: float,
) -> dec.Decision[T]:
    """Refuse a candidate whose image's Ray or Python the head's Ray refuses; the first one of a
    node type's image halts the node type and ends its other candidates of that image."""
    assert request.runtime is not None
    node_type = spec.node_types.get(record.node_type) if spec is not None else None
    image = slot_request.image or (node_type.image if node_type else None) or "of unknown name"
    fingerprint = slot_request.fingerprint or (node_type.ray_fingerprint if node_type else "")
    message = f"image {image} has {request.runtime.says()}, the head runs {head.says()}: {why}"
    refused = f"enrollment of instance {request.instance_id} refused ({VERSION_MISMATCH})"
    key = breaker_key(record.cluster, record.node_type)
    state = records.breakers.get(key, BreakerState())
    data = _mismatch_data(request, image, head)
    refusal = dec.Refusal(403, VERSION_MISMATCH, message)
    if state.halted(fingerprint):
        note = dec.Note(
            LedgerKind.NOTE,
            VERSION_MISMATCH,
            f"{refused}: {message}; node type {record.node_type} is halted already",
            record=record.id,
            instance=request.instance_id,
            data=data,
        )
        return dec.Decision(records, (note,), (), refusal)
    halt = Halt(now, VERSION_MISMATCH, message, image, fingerprint, record.id)
    updated = replace(records, breakers={**records.breakers, key: replace(state, halt=halt)})
    updated, destroys = _end_same_image(updated, record, fingerprint, message, now=now)
    ended = f"; {len(destroys)} other candidate(s) of it destroyed" if destroys else ""
    note = dec.Note(
        LedgerKind.DETECTION,
        VERSION_MISMATCH,
        f"{refused}: {message}. Node type {record.node_type} is halted: no rental until its image "
        f"or env changes (every host would fail the same way){ended}",
        record=record.id,
        instance=request.instance_id,
        data={**data, "halted": record.node_type, "destroyed": [a.record for a in destroys]},
    )
    return dec.Decision(updated, (note,), tuple(destroys), refusal)


def _mismatch_data(request: EnrollRequest, image: str, head: RayVersions) -> dict[str, object]:
    return {
        "boot_id": request.boot_id,
        "refused": VERSION_MISMATCH,
        "image": image,
        "head_ray_version": head.ray,
        "head_python_version": head.python,
        **runtime_data(request),
    }


def _end_same_image(
    records: Records, refused: InstanceRecord, fingerprint: str, message: str, *, now: float
) -> tuple[Records, list[Action]]:
    """The halted node type's other candidates of the same image: destroyed at once."""
    destroys: list[Action] = []
    for other in list(records.instances.values()):
        if not _same_image(records, other, refused, fingerprint):
            continue
        detail = f"node type {refused.node_type} is halted: {message}"
        records = dec.put(records, dec.doomed(other, VERSION_MISMATCH, now))
        destroys.append(dec.destroy(other, VERSION_MISMATCH, detail))
    return records, destroys


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
