"""What every provider action of the executor is made of, and the rules each one keeps.

An action claims its machine first (`InFlight`: two executors of one journal never call vast about
the same machine at once), calls vast only through `_vast` (never under the records lock: every
enrollment and heartbeat would wait on it), saves only the fields it owns of the record as it is
now (`_change`: a heartbeat that landed meanwhile is kept), and ledgers its decision, its call and
its outcome (`_log`). `Steps` holds these, and the executor's dependencies; the actions themselves
are in `executor.py` (destroy, stop, start) and `renting.py` (rent). What must not live here: any
decision of what to do, and any call to vast that is not one of an action's own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler.applying.books import Books
from reconciler.applying.launch import Launcher
from reconciler.applying.provider import Provider
from reconciler.model.evolve import evolve
from reconciler.model.observed import Offer
from reconciler.model.plan import Action
from reconciler.model.records import InstanceRecord, Intent, Records
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerEvent, LedgerKind

T = TypeVar("T")


class LockHeldError(RuntimeError):
    """A call to vast was about to be made while this thread held the records lock: every
    enrollment and heartbeat would wait on vast (a bug in the caller, never in production)."""


class InFlight:
    """The machines a call to vast is under way for, shared by every executor of one journal."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._guard = threading.Lock()

    def claim(self, key: str) -> bool:
        with self._guard:
            if key in self._keys:
                return False
            self._keys.add(key)
            return True

    def release(self, key: str) -> None:
        with self._guard:
            self._keys.discard(key)

    def __contains__(self, key: object) -> bool:
        with self._guard:
            return key in self._keys


class Skip(Exception):
    """This action is not carried out: the reason is said and ledgered as an outcome."""


@dataclass
class Steps:
    """The executor's dependencies, and the steps its actions are made of."""

    provider: Provider
    journal: Books
    launcher: Launcher
    specs: Mapping[str, ClusterSpec]
    now: Callable[[], float]
    stop_requested: Callable[[], bool] = lambda: False
    progress: Callable[[str], None] = lambda line: None
    inflight: InFlight = field(default_factory=InFlight)
    # Within one `carry_out`: the offers searched again per (cluster, node type) when a planned
    # offer was gone, and the offers tried, so that each later replacement of the run picks from
    # that one search (vast allows few searches a minute; a tick renting 100 searched 100 times).
    searched: dict[tuple[str, str], list[Offer]] = field(default_factory=dict)
    tried: set[int] = field(default_factory=set)
    # The offers the run's rents were planned on: a replacement does not take one of them from
    # the rent it was planned for.
    planned: set[int] = field(default_factory=set)

    @property
    def records(self) -> Records:
        """The current records (shared; read under the lock)."""
        return self.journal.records()

    def _claim(self, action: Action) -> str:
        """This machine is ours to call vast about until `_release` (or `Skip`)."""
        key = action.record or f"vast:{action.vast_id}"
        if not self.inflight.claim(key):
            raise Skip("a call for it is already under way")
        return key

    def _vast(self, call: Callable[[], T]) -> T:
        """Every call to vast goes through here: never under the records lock, and only while the
        state's lock is still ours (a lease may have lapsed, or been force-unlocked: vast cannot
        check a fencing token, so the caller must stop itself)."""
        if self.journal.lock.held_here():
            raise LockHeldError("a call to vast under the records lock")
        self.journal.check_lease()
        return call()

    def _find(self, record: InstanceRecord | None) -> int | None:
        if record is None:
            return None
        if record.vast_id is not None:
            return record.vast_id
        for instance in self._vast(self.provider.list_instances):
            if instance.label == record.label:
                return instance.id
        return None

    def _current(self, record_id: str | None) -> InstanceRecord | None:
        return self.records.instances.get(record_id) if record_id else None

    def _unended(self, action: Action) -> InstanceRecord:
        """The record a stop or start acts on, unless it has ended or is being destroyed since
        the plan was made (the head may have doomed it meanwhile: a destroy outranks both)."""
        record = self._current(action.record)
        if record is None:
            raise Skip("no record of it")
        if not record.live:
            raise Skip("already destroyed")
        if record.intent is Intent.DESTROYED:
            raise Skip("a destroy of it is under way")
        return record

    def _change(self, record_id: str, **fields: object) -> InstanceRecord:
        """Set these fields of the record as it is now (the head may have changed others since
        this executor last looked), and save, in one hold of the lock."""
        with self.journal.lock:
            record = evolve(self.records.instances[record_id], **fields)
            self.journal.update(lambda records: put(records, record))
            return record

    def _become(
        self, record_id: str, transition: Callable[[InstanceRecord], InstanceRecord]
    ) -> InstanceRecord:
        """`_change` by one of the record's transitions (`InstanceRecord.doomed`, `closed`...)."""
        with self.journal.lock:
            record = transition(self.records.instances[record_id])
            self.journal.update(lambda records: put(records, record))
            return record

    def _log_decision(self, action: Action) -> None:
        self._log(action, LedgerKind.DECISION, f"{action.kind.value}: {action.detail}")

    def _log(
        self,
        action: Action,
        kind: LedgerKind,
        message: str,
        *,
        outcome: str | None = None,
        instance: int | None = None,
        dph: float | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        if kind is LedgerKind.OUTCOME:
            self.progress(f"{action.cluster}: {who(action)}: {action.kind.value}: {message}")
        data: dict[str, object] = {"action": action.kind.value}
        if outcome:
            data["outcome"] = outcome
        if action.host_id is not None:
            data["host_id"] = action.host_id
        data.update(extra or {})
        self.journal.ledger.append(
            LedgerEvent(
                action.cluster,
                kind,
                action.reason,
                message,
                record=action.record,
                instance=instance if instance is not None else action.vast_id,
                dph=dph if dph is not None else (action.dph_delta or None),
                data=data,
            )
        )


def who(action: Action) -> str:
    return action.record or f"instance {action.vast_id}"


def put(records: Records, record: InstanceRecord) -> Records:
    return evolve(records, instances={**records.instances, record.id: record})


def require(value: T | None) -> T:
    if value is None:
        raise ValueError("a plan action is missing a field the executor needs")
    return value
