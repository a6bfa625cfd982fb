"""What a decision of the head is: new records, plus what to do about them.

The head's decisions (`enrollment`, `heartbeats`, `reports`) are pure functions
`(records, message, now) -> Decision`. The service applies a decision under the one lock it shares
with the watch controller: it saves the records, writes the notes to the ledger, answers the agent,
and hands the destroys (plan actions, as every change at vast is) to the one applier. Keeping
the effects as data is what lets a test check
"the extra candidates are destroyed" without a network, and the service do it without thinking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from reconciler.model.evolve import evolve
from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import InstanceRecord, Records
from reconciler.state.ledger import LedgerKind

T = TypeVar("T")


@dataclass(frozen=True)
class Note:
    """One ledger line the decision wants written."""

    kind: LedgerKind
    cls: str
    message: str
    record: str | None = None
    instance: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """A non-200 answer to the agent (agent-error.v1.json)."""

    status: int
    error: str
    message: str


@dataclass(frozen=True)
class Decision(Generic[T]):
    records: Records
    notes: tuple[Note, ...] = ()
    # Plan actions for the one applier (DESTROY only): the record is already `destroying` in
    # `records` (intent before the call), and is marked destroyed once vast confirms.
    destroys: tuple[Action, ...] = ()
    refusal: Refusal | None = None
    outcome: T | None = None
    # The records changed only in a worker's clocks (a heartbeat with nothing else to say): kept
    # in memory at once, written within `settings.KEPT_CLOCKS_SECONDS` (`RecordsStore.keep`).
    clocks_only: bool = False


def put(records: Records, record: InstanceRecord) -> Records:
    instances = dict(records.instances)
    instances[record.id] = record
    return evolve(records, instances=instances)


def doomed(record: InstanceRecord, reason: str, now: float) -> InstanceRecord:
    """The record as it is saved before its destroy call: intent destroyed, phase destroying."""
    return record.doomed(ended_reason=reason, ended_at=record.ended_at or now)


def destroy(record: InstanceRecord, cls: str, detail: str) -> Action:
    """The plan action that ends this machine (the head's immediate destroys)."""
    return Action.on(ActionKind.DESTROY, record, cls, detail, -record.billing_dph)


def revoke(records: Records, serial: int) -> Records:
    if serial in records.revoked_certs:
        return records
    return evolve(records, revoked_certs=(*records.revoked_certs, serial))


def ours(record: InstanceRecord | None, *, cluster: str, lineage: str) -> bool:
    """A record the head may act on: this cluster's, made by this state (DESIGN.md rule 9)."""
    return record is not None and record.cluster == cluster and record.managed_by == lineage


def comes_from(record: InstanceRecord, peer: str | None) -> bool:
    """Whether a request from `peer` provably comes from this instance: its source address is
    the instance's public address in vast's latest listing, or the address its enrollment came
    from. (On vast, instances on one host share its address: a neighbour on the same host can
    pass this; it cannot from anywhere else.)"""
    return peer is not None and peer in {record.listed_ip, record.enrolled_from} - {None}


def by_vast_id(records: Records, vast_id: int) -> InstanceRecord | None:
    """The live record of a vast instance, if any."""
    for record in records.instances.values():
        if record.vast_id == vast_id and record.live:
            return record
    return None
