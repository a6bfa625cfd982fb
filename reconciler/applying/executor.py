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

Here are the plan's commit, the order of its actions, and the destroy, stop and start; the rent
(the create path, with its re-pick of an offer at apply time) is in `renting.py`, and what every
action is made of (the claim, the call outside the lock, the change of owned fields, the ledger
lines), with the executor's dependencies, in `steps.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler import settings
from reconciler.applying.renting import Renting
from reconciler.applying.steps import LockHeldError, Skip, require, who
from reconciler.model.plan import Action, ActionKind, Plan
from reconciler.model.records import (
    InstanceRecord,
    retry_delay,
)
from reconciler.model.stretches import stopped_from, vanished_at
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.vast import errors as vast_errors

T = TypeVar("T")


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


class Executor(Renting):
    """Carries out a plan's actions: the destroy, stop and start here, the rent in `Renting`,
    each made of the steps of `Steps` (which holds the executor's dependencies)."""

    def apply(self, plan: Plan) -> ApplyResult:
        """Save the plan's bookkeeping, then carry out its actions in order."""
        self.commit(plan)
        return self.carry_out(plan.actions)

    def commit(self, plan: Plan) -> None:
        """The plan's bookkeeping (refresh, requests, blocklist, breaker) saved, its detections
        and its non-provider decisions ledgered. The caller that planned under the records lock
        commits in the same hold, so nothing that changed meanwhile is overwritten."""
        self.journal.update(plan.changes.apply)
        self._log_detections(plan)
        for action in plan.actions:
            if action.kind in (ActionKind.BLOCKLIST, ActionKind.PAUSE):
                self._log_decision(action)

    def carry_out(self, actions: Sequence[Action]) -> ApplyResult:
        """The actions in order, each calling vast without the records lock."""
        if self.journal.lock.held_here() and any(a.kind in _HANDLED for a in actions):
            raise LockHeldError("provider actions carried out under the records lock")
        result = ApplyResult()
        self.searched.clear()
        self.tried.clear()
        self.planned = {a.offer.offer_id for a in actions if a.kind is ActionKind.RENT and a.offer}
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
        except Skip as skip:
            self.progress(f"{action.cluster}: {who(action)}: {action.kind.value}: {skip}")
            result.skipped.append((action, str(skip)))
        except vast_errors.VastError as exc:
            self._log(action, LedgerKind.OUTCOME, f"failed: {exc}", outcome="error")
            result.failed.append((action, str(exc)))
        else:
            result.done.append(action)

    def _destroy(self, action: Action) -> None:
        key = self._claim(action)
        try:
            with self.journal.lock:
                record = self._current(action.record)
                if record is not None and not record.live:
                    raise Skip("already destroyed")
                if record is not None:
                    self._become(record.id, InstanceRecord.doomed)
            self._log_decision(action)
            vast_id = action.vast_id if action.vast_id is not None else self._find(record)
            gone_before = False
            if vast_id is not None:
                self._log(action, LedgerKind.CALL, f"destroy instance {vast_id}")
                answer = self._call(record, lambda: self.provider.destroy_instance(vast_id))
                gone_before = answer is False  # vast had ended it already
            if record is not None:
                now = self.now()
                at = vanished_at(record, now) if gone_before else now
                reason = record.ended_reason or action.reason
                self._become(
                    record.id, lambda r: r.closed(at, reason, call_attempts=0, retry_at=None)
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
                self._become(record.id, InstanceRecord.stop_called)
            self._log_decision(action)
            self._log(action, LedgerKind.CALL, f"stop instance {record.vast_id}")
            vast_id = require(record.vast_id)
            self._call(record, lambda: self.provider.stop_instance(vast_id))
            # vast has accepted it; the planner looks again later and sends it again if running
            with self.journal.lock:
                now = self.now()
                billed = stopped_from(self.records.instances[record.id], now).stopped
                self._change(
                    record.id, retry_at=now + settings.STOP_CONFIRM_SECONDS, stopped=billed
                )
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

    def _start(self, action: Action) -> None:
        key = self._claim(action)
        try:
            with self.journal.lock:
                record = self._unended(action)
                self._become(record.id, InstanceRecord.start_asked)
            self._log_decision(action)
            self._log(action, LedgerKind.CALL, f"start instance {record.vast_id}")
            vast_id = require(record.vast_id)
            self._vast(lambda: self.provider.start_instance(vast_id))
            now = self.now()
            self._become(record.id, lambda current: current.start_called(now))
            self._log(action, LedgerKind.OUTCOME, "start requested", outcome="ok")
        finally:
            self.inflight.release(key)

    # --- helpers ---------------------------------------------------------------------------

    def _log_detections(self, plan: Plan) -> None:
        records = self.records
        for found in plan.detections:
            record = records.instances.get(found.record)
            request = records.requests.get(found.record)
            owner = record.cluster if record else request.cluster if request else None
            cluster = found.cluster or owner or "unknown"
            self.journal.ledger.append(
                LedgerEvent(
                    cluster,
                    LedgerKind.DETECTION,
                    found.cls,
                    found.detail,
                    record=found.record,
                    instance=found.vast_id
                    if found.vast_id is not None
                    else (record.vast_id if record else None),
                )
            )


_HANDLED = frozenset({ActionKind.DESTROY, ActionKind.RENT, ActionKind.STOP, ActionKind.START})
