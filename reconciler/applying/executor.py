"""The executor: the only code that changes anything at vast (the layering check enforces it).

Every change at vast is an action of a plan carried out here: the planner's, the nets', the head's
immediate destroys and `down`'s. It carries out a plan action by action. Before every provider
call the intent (and, for a rent, the pending create with the label the call will carry) is saved;
after every call the outcome is saved. So a crash at any point leaves every billed instance either
recorded or findable by its label, and the next run finishes what this one started.

The records are shared with the head's handlers (the journal's lock): each step takes the lock to
read the current record and save its intent, releases it for the call to vast, and takes it again
to save the outcome, changing only the fields it owns, so a heartbeat that landed meanwhile is
kept and no enrollment or heartbeat ever waits on vast. Two executors of one journal never call
vast about the same machine at once (`InFlight`): a destroy the head sent is not sent again by a
tick that planned it a moment before.

- a lost create response is looked up in the listing by label and adopted, never rented again;
- a failed destroy leaves its record `destroying`, which the next plan finishes;
- a stop request (the first SIGINT/SIGTERM) lets the call in flight finish, saves, and stops
  before the next action.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler.applying.books import Books
from reconciler.applying.launch import Launcher
from reconciler.applying.provider import Provider
from reconciler.applying.search import offer_search
from reconciler.model.evolve import evolve
from reconciler.model.observed import Offer
from reconciler.model.plan import Action, ActionKind, OfferChoice, Plan
from reconciler.model.records import (
    STOP_CONFIRM_SECONDS,
    InstanceRecord,
    Intent,
    Phase,
    Records,
    Role,
    retry_delay,
    started_from,
    stopped_from,
    vanished_at,
)
from reconciler.model.spec import ClusterSpec
from reconciler.planning import offers as offer_picking
from reconciler.state.ledger import LedgerKind
from reconciler.vast import errors as vast_errors

T = TypeVar("T")

# How many offers a rent tries after its planned one is gone, before giving up this run.
RENT_ATTEMPTS = 5


class LockHeldError(RuntimeError):
    """A call to vast was about to be made while this thread held the records lock: every
    enrollment and heartbeat would wait on vast (a bug in the caller, never in production)."""


@dataclass
class ApplyResult:
    done: list[Action] = field(default_factory=list)
    failed: list[tuple[Action, str]] = field(default_factory=list)
    # Actions another executor was already carrying out, or that an earlier one finished.
    skipped: list[tuple[Action, str]] = field(default_factory=list)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


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


class _Skip(Exception):
    """This action is not carried out: the reason is said and ledgered as an outcome."""


@dataclass
class Executor:
    provider: Provider
    journal: Books
    launcher: Launcher
    specs: Mapping[str, ClusterSpec]
    now: Callable[[], float]
    stop_requested: Callable[[], bool] = lambda: False
    progress: Callable[[str], None] = lambda line: None
    inflight: InFlight = field(default_factory=InFlight)

    @property
    def records(self) -> Records:
        """The current records (shared; read under the lock)."""
        return self.journal.records()

    def apply(self, plan: Plan) -> ApplyResult:
        """Save the plan's bookkeeping, then carry out its actions in order."""
        self.commit(plan)
        return self.carry_out(plan.actions)

    def commit(self, plan: Plan) -> None:
        """The plan's bookkeeping (refresh, requests, blocklist, breaker) saved, its detections
        and its non-provider decisions ledgered. The caller that planned under the records lock
        commits in the same hold, so nothing that changed meanwhile is overwritten."""
        with self.journal.lock:
            self.journal.save(plan.records)
        self._log_detections(plan)
        for action in plan.actions:
            if action.kind in (ActionKind.BLOCKLIST, ActionKind.PAUSE):
                self._log_decision(action)

    def carry_out(self, actions: Sequence[Action]) -> ApplyResult:
        """The actions in order, each calling vast without the records lock."""
        if self.journal.lock.held_here() and any(a.kind in _HANDLED for a in actions):
            raise LockHeldError("provider actions carried out under the records lock")
        result = ApplyResult()
        for action in actions:
            if self.stop_requested():
                result.interrupted = True
                break
            self._carry_out(action, result)
        return result

    # --- one action ------------------------------------------------------------------------

    def _carry_out(self, action: Action, result: ApplyResult) -> None:
        handler = {
            ActionKind.DESTROY: self._destroy,
            ActionKind.RENT: self._rent,
            ActionKind.STOP: self._stop,
            ActionKind.START: self._start,
        }.get(action.kind)
        if handler is None:
            result.done.append(action)
            return
        try:
            handler(action)
        except _Skip as skip:
            self.progress(f"{action.cluster}: {_who(action)}: {action.kind.value}: {skip}")
            result.skipped.append((action, str(skip)))
        except vast_errors.VastError as exc:
            self._log(action, LedgerKind.OUTCOME, f"failed: {exc}", outcome="error")
            result.failed.append((action, str(exc)))
        else:
            result.done.append(action)

    def _claim(self, action: Action) -> str:
        """This machine is ours to call vast about until `_release` (or `_Skip`)."""
        key = action.record or f"vast:{action.vast_id}"
        if not self.inflight.claim(key):
            raise _Skip("a call for it is already under way")
        return key

    def _destroy(self, action: Action) -> None:
        key = self._claim(action)
        try:
            with self.journal.lock:
                record = self._current(action.record)
                if record is not None and not record.live:
                    raise _Skip("already destroyed")
                if record is not None:
                    self._change(record.id, intent=Intent.DESTROYED, phase=Phase.DESTROYING)
            self._log_decision(action)
            vast_id = action.vast_id if action.vast_id is not None else self._find(record)
            gone_before = False
            if vast_id is not None:
                self._log(action, LedgerKind.CALL, f"destroy instance {vast_id}")
                answer = self._call(record, lambda: self.provider.destroy_instance(vast_id))
                gone_before = answer is False  # vast had ended it already
            if record is not None:
                now = self.now()
                self._change(
                    record.id,
                    phase=Phase.DESTROYED,
                    ended_at=vanished_at(record, now) if gone_before else now,
                    ended_reason=record.ended_reason or action.reason,
                    call_attempts=0,
                    retry_at=None,
                )
            self._log(
                action,
                LedgerKind.OUTCOME,
                f"instance {vast_id} destroyed",
                outcome="ok",
                extra=self._unrecorded_facts(record, vast_id),
            )
        finally:
            self.inflight.release(key)

    def _unrecorded_facts(
        self, record: InstanceRecord | None, vast_id: int | None
    ) -> dict[str, object]:
        """What the ledger keeps of an instance no record answers for (an orphan), so that its
        dollars are counted (`ray-vast cost`): when we first saw it billing."""
        seen = self.records.unrecorded_seen.get(vast_id) if vast_id is not None else None
        return {"first_seen": seen} if record is None and seen is not None else {}

    def _stop(self, action: Action) -> None:
        key = self._claim(action)
        try:
            with self.journal.lock:
                record = self._unended(action)
                self._change(record.id, intent=Intent.STOPPED, phase=Phase.STOPPING)
            self._log_decision(action)
            self._log(action, LedgerKind.CALL, f"stop instance {record.vast_id}")
            vast_id = _require(record.vast_id)
            self._call(record, lambda: self.provider.stop_instance(vast_id))
            # vast has accepted it; the planner looks again later and sends it again if running
            with self.journal.lock:
                now = self.now()
                billed = stopped_from(self.records.instances[record.id], now).stopped
                self._change(record.id, retry_at=now + STOP_CONFIRM_SECONDS, stopped=billed)
            self._log(action, LedgerKind.OUTCOME, "stop requested", outcome="ok")
        finally:
            self.inflight.release(key)

    def _call(self, record: InstanceRecord | None, call: Callable[[], T]) -> T:
        """A destroy or stop call; when it fails, the record keeps its transitional phase and
        notes when to try again (backoff), so the planner sends it again until vast confirms."""
        try:
            return self._vast(call)
        except vast_errors.VastError:
            if record is not None:
                with self.journal.lock:
                    attempts = self.records.instances[record.id].call_attempts + 1
                    self._change(
                        record.id,
                        call_attempts=attempts,
                        retry_at=self.now() + retry_delay(attempts),
                    )
            raise

    def _vast(self, call: Callable[[], T]) -> T:
        """Every call to vast goes through here: never under the records lock."""
        if self.journal.lock.held_here():
            raise LockHeldError("a call to vast under the records lock")
        return call()

    def _start(self, action: Action) -> None:
        key = self._claim(action)
        try:
            with self.journal.lock:
                record = self._unended(action)
                self._change(record.id, intent=Intent.RUNNING)
            self._log_decision(action)
            self._log(action, LedgerKind.CALL, f"start instance {record.vast_id}")
            vast_id = _require(record.vast_id)
            self._vast(lambda: self.provider.start_instance(vast_id))
            with self.journal.lock:
                billed = started_from(self.records.instances[record.id], self.now()).stopped
                self._change(record.id, phase=Phase.PULLING, stopped=billed)
            self._log(action, LedgerKind.OUTCOME, "start requested", outcome="ok")
        finally:
            self.inflight.release(key)

    # --- renting ---------------------------------------------------------------------------

    def _rent(self, action: Action) -> None:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[action.node_type or ""]
        choice = _require(action.offer)
        key = self._claim(action)
        try:
            record = self._pending_record(action, spec, choice)
            self._log_decision(action)
            for _ in range(RENT_ATTEMPTS):
                if self._try_create(action, record, choice):
                    return
                replacement = self._replacement(spec, node_type.name, record)
                if replacement is None:
                    break
                choice = replacement
                record = self._pending_record(action, spec, choice)
            self._change(
                record.id,
                phase=Phase.DESTROYED,
                intent=Intent.DESTROYED,
                ended_at=self.now(),
                ended_reason="no offer could be rented",
            )
        finally:
            self.inflight.release(key)
        raise vast_errors.VastOfferGoneError(
            f"no acceptable offer could be rented for {action.cluster}/{action.node_type}",
            operation="create",
        )

    def _pending_record(
        self, action: Action, spec: ClusterSpec, choice: OfferChoice
    ) -> InstanceRecord:
        """The record of the create about to happen, saved before the call (rule: intent first)."""
        node_type = spec.node_types[action.node_type or ""]
        record = InstanceRecord(
            id=_require(action.record),
            cluster=action.cluster,
            node_type=node_type.name,
            managed_by=self.journal.lineage,
            label=_require(action.label),
            role=Role.CANDIDATE,
            intent=Intent.RUNNING,
            phase=Phase.PENDING_CREATE,
            created_at=self.now(),
            offer_id=choice.offer_id,
            machine_id=choice.machine_id,
            host_id=choice.host_id,
            dph_total=choice.dph_total,
            storage_dph=choice.storage_dph,
            request_id=action.request,
            exempt=not node_type.agent,
        )
        self.journal.update(lambda records: _put(records, record))
        return record

    def _try_create(self, action: Action, record: InstanceRecord, choice: OfferChoice) -> bool:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[record.node_type]
        bid = _bid(node_type.offer.type, node_type.offer.max_bid_dollars_per_hour, choice)
        request = self.launcher.create_request(spec, node_type, record, bid=bid)
        self.journal.update(lambda records: self.launcher.before_create(records, record))
        self._log(
            action, LedgerKind.CALL, f"create from offer {choice.offer_id}", dph=choice.dph_total
        )
        try:
            created = self._vast(lambda: self.provider.create_instance(choice.offer_id, request))
        except vast_errors.VastOfferGoneError:
            self._log(
                action, LedgerKind.OUTCOME, f"offer {choice.offer_id} is gone", outcome="offer_gone"
            )
            self._change(
                record.id,
                phase=Phase.DESTROYED,
                intent=Intent.DESTROYED,
                ended_at=self.now(),
                ended_reason="offer gone",
            )
            return False
        except vast_errors.CreateLeftInstanceError as exc:
            self._adopt_refused(action, record, exc)
            raise
        except vast_errors.CreateOutcomeUnknownError:
            self._resolve_unknown(action, record)
            return True
        # vast bills an interruptible rental at its bid (and its storage), not the offer's price
        billed = choice.dph_total if bid is None else bid + choice.storage_dph
        rented = self._change(
            record.id, vast_id=created.instance_id, phase=Phase.RENTING, dph_total=billed
        )
        self.launcher.created(rented, created)
        self._log(
            action,
            LedgerKind.OUTCOME,
            f"instance {created.instance_id} rented",
            outcome="ok",
            instance=created.instance_id,
            dph=billed,
        )
        return True

    def _resolve_unknown(self, action: Action, record: InstanceRecord) -> None:
        """A create whose answer was lost: adopt it if the listing shows the label."""
        found = self._find(record)
        if found is not None:
            self._change(record.id, vast_id=found, phase=Phase.RENTING)
            message = f"create response lost; adopted instance {found} by its label"
        else:
            message = "create response lost and the label is not listed yet; kept pending"
        self._log(action, LedgerKind.OUTCOME, message, outcome="unknown", instance=found)

    def _adopt_refused(
        self, action: Action, record: InstanceRecord, exc: vast_errors.CreateLeftInstanceError
    ) -> None:
        """vast refused the create but left an instance: record it so it is destroyed."""
        self._change(
            record.id,
            vast_id=exc.instance_id,
            intent=Intent.DESTROYED,
            phase=Phase.DESTROYING,
            ended_reason="create refused but left an instance",
        )
        self._log(action, LedgerKind.OUTCOME, str(exc), outcome="refused", instance=exc.instance_id)

    def _replacement(
        self, spec: ClusterSpec, node_type_name: str, failed: InstanceRecord
    ) -> OfferChoice | None:
        """Search again right before renting: the next acceptable offer under the cap."""
        node_type = spec.node_types[node_type_name]
        offers: list[Offer] = self._vast(
            lambda: self.provider.search_offers(offer_search(node_type))
        )
        records = self.records
        spent = sum(
            r.billing_dph for r in records.instances.values() if r.cluster == spec.name and r.live
        )
        busy = frozenset(
            r.machine_id
            for r in records.instances.values()
            if r.live and r.request_id == failed.request_id
        ) | {failed.machine_id}
        selection = offer_picking.choose(
            offers,
            cluster=spec.name,
            node_type=node_type,
            count=1,
            blocked=records.blocked_hosts(spec.name, self.now()),
            busy_machines=busy,
            budget=offer_picking.Budget(spent=spent, cap=spec.max_dollars_per_hour),
        )
        return selection.chosen[0] if selection.chosen else None

    # --- helpers ---------------------------------------------------------------------------

    def _log_detections(self, plan: Plan) -> None:
        records = self.records
        for found in plan.detections:
            record = records.instances.get(found.record)
            request = records.requests.get(found.record)
            owner = record.cluster if record else request.cluster if request else None
            cluster = found.cluster or owner or "unknown"
            self.journal.log(
                cluster,
                LedgerKind.DETECTION,
                found.cls,
                found.detail,
                record=found.record,
                instance=found.vast_id
                if found.vast_id is not None
                else (record.vast_id if record else None),
            )

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
            raise _Skip("no record of it")
        if not record.live:
            raise _Skip("already destroyed")
        if record.intent is Intent.DESTROYED:
            raise _Skip("a destroy of it is under way")
        return record

    def _change(self, record_id: str, **fields: object) -> InstanceRecord:
        """Set these fields of the record as it is now (the head may have changed others since
        this executor last looked), and save, in one hold of the lock."""
        with self.journal.lock:
            record = evolve(self.records.instances[record_id], **fields)
            self.journal.update(lambda records: _put(records, record))
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
            self.progress(f"{action.cluster}: {_who(action)}: {action.kind.value}: {message}")
        data: dict[str, object] = {"action": action.kind.value}
        if outcome:
            data["outcome"] = outcome
        if action.host_id is not None:
            data["host_id"] = action.host_id
        data.update(extra or {})
        self.journal.log(
            action.cluster,
            kind,
            action.reason,
            message,
            record=action.record,
            instance=instance if instance is not None else action.vast_id,
            dph=dph if dph is not None else (action.dph_delta or None),
            data=data,
        )


_HANDLED = frozenset({ActionKind.DESTROY, ActionKind.RENT, ActionKind.STOP, ActionKind.START})


def _who(action: Action) -> str:
    return action.record or f"instance {action.vast_id}"


def _put(records: Records, record: InstanceRecord) -> Records:
    return evolve(records, instances={**records.instances, record.id: record})


def _bid(offer_type: str, max_bid: float | None, choice: OfferChoice) -> float | None:
    if offer_type != "bid":
        return None
    return max_bid if max_bid is not None else choice.dph_total


def _require(value: T | None) -> T:
    if value is None:
        raise ValueError("a plan action is missing a field the executor needs")
    return value
