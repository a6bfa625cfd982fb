"""The executor: the only code that changes anything at vast.

It carries out a plan action by action. Before every provider call the intent (and, for a rent,
the pending create with the label the call will carry) is saved; after every call the outcome is
saved. So a crash at any point leaves every billed instance either recorded or findable by its
label, and the next run finishes what this one started:

- a lost create response is looked up in the listing by label and adopted, never rented again;
- a failed destroy leaves its record `destroying`, which the next plan finishes;
- a stop request (the first SIGINT/SIGTERM) lets the call in flight finish, saves, and stops
  before the next action.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from reconciler.applying.journal import Journal
from reconciler.applying.launch import Launcher
from reconciler.applying.provider import Provider
from reconciler.applying.search import offer_search
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
)
from reconciler.model.spec import ClusterSpec
from reconciler.planning import offers as offer_picking
from reconciler.state.ledger import LedgerKind
from reconciler.vast import errors as vast_errors

T = TypeVar("T")

# How many offers a rent tries after its planned one is gone, before giving up this run.
RENT_ATTEMPTS = 5


@dataclass
class ApplyResult:
    done: list[Action] = field(default_factory=list)
    failed: list[tuple[Action, str]] = field(default_factory=list)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


@dataclass
class Executor:
    provider: Provider
    journal: Journal
    launcher: Launcher
    specs: Mapping[str, ClusterSpec]
    now: Callable[[], float]
    stop_requested: Callable[[], bool] = lambda: False
    progress: Callable[[str], None] = lambda line: None
    records: Records = field(init=False)

    def apply(self, plan: Plan) -> ApplyResult:
        """Save the plan's bookkeeping, then carry out its actions in order."""
        self.records = plan.records
        self._save()
        self._log_detections(plan)
        for action in plan.actions:
            if action.kind in (ActionKind.BLOCKLIST, ActionKind.PAUSE):
                self._log_decision(action)
        result = ApplyResult()
        for action in plan.actions:
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
        except vast_errors.VastError as exc:
            self._log(action, LedgerKind.OUTCOME, f"failed: {exc}", outcome="error")
            result.failed.append((action, str(exc)))
        else:
            result.done.append(action)

    def _destroy(self, action: Action) -> None:
        record = self.records.instances.get(action.record) if action.record else None
        vast_id = action.vast_id if action.vast_id is not None else self._find(record)
        if record is not None:
            self._put(replace(record, intent=Intent.DESTROYED, phase=Phase.DESTROYING))
            self._save()
        self._log_decision(action)
        if vast_id is not None:
            self._log(action, LedgerKind.CALL, f"destroy instance {vast_id}")
            self._call(record, lambda: self.provider.destroy_instance(vast_id))
        if record is not None:
            ended = replace(
                self.records.instances[record.id],
                phase=Phase.DESTROYED,
                ended_at=self.now(),
                ended_reason=record.ended_reason or action.reason,
                call_attempts=0,
                retry_at=None,
            )
            self._put(ended)
            self._save()
        self._log(action, LedgerKind.OUTCOME, f"instance {vast_id} destroyed", outcome="ok")

    def _stop(self, action: Action) -> None:
        record = self.records.instances[action.record or ""]
        self._put(replace(record, intent=Intent.STOPPED, phase=Phase.STOPPING))
        self._save()
        self._log_decision(action)
        self._log(action, LedgerKind.CALL, f"stop instance {record.vast_id}")
        vast_id = _require(record.vast_id)
        self._call(record, lambda: self.provider.stop_instance(vast_id))
        # vast has accepted it; the planner looks again later and sends it again if still running
        current = self.records.instances[record.id]
        self._put(replace(current, retry_at=self.now() + STOP_CONFIRM_SECONDS))
        self._save()
        self._log(action, LedgerKind.OUTCOME, "stop requested", outcome="ok")

    def _call(self, record: InstanceRecord | None, call: Callable[[], object]) -> None:
        """A destroy or stop call; when it fails, the record keeps its transitional phase and
        notes when to try again (backoff), so the planner sends it again until vast confirms."""
        try:
            call()
        except vast_errors.VastError:
            if record is not None:
                current = self.records.instances[record.id]
                attempts = current.call_attempts + 1
                self._put(
                    replace(
                        current,
                        call_attempts=attempts,
                        retry_at=self.now() + retry_delay(attempts),
                    )
                )
                self._save()
            raise

    def _start(self, action: Action) -> None:
        record = self.records.instances[action.record or ""]
        self._put(replace(record, intent=Intent.RUNNING))
        self._save()
        self._log_decision(action)
        self._log(action, LedgerKind.CALL, f"start instance {record.vast_id}")
        self.provider.start_instance(_require(record.vast_id))
        self._put(replace(self.records.instances[record.id], phase=Phase.PULLING))
        self._save()
        self._log(action, LedgerKind.OUTCOME, "start requested", outcome="ok")

    # --- renting ---------------------------------------------------------------------------

    def _rent(self, action: Action) -> None:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[action.node_type or ""]
        choice = _require(action.offer)
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
        self._put(
            replace(
                self.records.instances[record.id],
                phase=Phase.DESTROYED,
                intent=Intent.DESTROYED,
                ended_at=self.now(),
                ended_reason="no offer could be rented",
            )
        )
        self._save()
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
        self._put(record)
        self._save()
        return record

    def _try_create(self, action: Action, record: InstanceRecord, choice: OfferChoice) -> bool:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[record.node_type]
        bid = _bid(node_type.offer.type, node_type.offer.max_bid_dollars_per_hour, choice)
        request = self.launcher.create_request(spec, node_type, record, bid=bid)
        self.records = self.launcher.before_create(self.records, record)
        self._save()
        self._log(
            action, LedgerKind.CALL, f"create from offer {choice.offer_id}", dph=choice.dph_total
        )
        try:
            created = self.provider.create_instance(choice.offer_id, request)
        except vast_errors.VastOfferGoneError:
            self._log(
                action, LedgerKind.OUTCOME, f"offer {choice.offer_id} is gone", outcome="offer_gone"
            )
            self._put(
                replace(
                    record,
                    phase=Phase.DESTROYED,
                    intent=Intent.DESTROYED,
                    ended_at=self.now(),
                    ended_reason="offer gone",
                )
            )
            self._save()
            return False
        except vast_errors.CreateLeftInstanceError as exc:
            self._adopt_refused(action, record, exc)
            raise
        except vast_errors.CreateOutcomeUnknownError:
            self._resolve_unknown(action, record)
            return True
        self._put(replace(record, vast_id=created.instance_id, phase=Phase.RENTING))
        self._save()
        self.launcher.created(self.records.instances[record.id], created)
        self._log(
            action,
            LedgerKind.OUTCOME,
            f"instance {created.instance_id} rented",
            outcome="ok",
            instance=created.instance_id,
            dph=choice.dph_total,
        )
        return True

    def _resolve_unknown(self, action: Action, record: InstanceRecord) -> None:
        """A create whose answer was lost: adopt it if the listing shows the label."""
        found = self._find(record)
        if found is not None:
            self._put(replace(record, vast_id=found, phase=Phase.RENTING))
            message = f"create response lost; adopted instance {found} by its label"
        else:
            message = "create response lost and the label is not listed yet; kept pending"
        self._save()
        self._log(action, LedgerKind.OUTCOME, message, outcome="unknown", instance=found)

    def _adopt_refused(
        self, action: Action, record: InstanceRecord, exc: vast_errors.CreateLeftInstanceError
    ) -> None:
        """vast refused the create but left an instance: record it so it is destroyed."""
        self._put(
            replace(
                record,
                vast_id=exc.instance_id,
                intent=Intent.DESTROYED,
                phase=Phase.DESTROYING,
                ended_reason="create refused but left an instance",
            )
        )
        self._save()
        self._log(action, LedgerKind.OUTCOME, str(exc), outcome="refused", instance=exc.instance_id)

    def _replacement(
        self, spec: ClusterSpec, node_type_name: str, failed: InstanceRecord
    ) -> OfferChoice | None:
        """Search again right before renting: the next acceptable offer under the cap."""
        node_type = spec.node_types[node_type_name]
        offers: list[Offer] = self.provider.search_offers(offer_search(node_type))
        spent = sum(
            r.billing_dph
            for r in self.records.instances.values()
            if r.cluster == spec.name and r.live
        )
        busy = frozenset(
            r.machine_id
            for r in self.records.instances.values()
            if r.live and r.request_id == failed.request_id
        ) | {failed.machine_id}
        selection = offer_picking.choose(
            offers,
            cluster=spec.name,
            node_type=node_type,
            count=1,
            blocked=self.records.blocked_hosts(spec.name, self.now()),
            busy_machines=busy,
            budget=offer_picking.Budget(spent=spent, cap=spec.max_dollars_per_hour),
        )
        return selection.chosen[0] if selection.chosen else None

    # --- helpers ---------------------------------------------------------------------------

    def _log_detections(self, plan: Plan) -> None:
        for found in plan.detections:
            record = self.records.instances.get(found.record)
            request = self.records.requests.get(found.record)
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
        for instance in self.provider.list_instances():
            if instance.label == record.label:
                return instance.id
        return None

    def _put(self, record: InstanceRecord) -> None:
        instances = dict(self.records.instances)
        instances[record.id] = record
        self.records = replace(self.records, instances=instances)

    def _save(self) -> None:
        self.journal.save(self.records)

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
    ) -> None:
        if kind is LedgerKind.OUTCOME:
            who = action.record or f"instance {action.vast_id}"
            self.progress(f"{action.cluster}: {who}: {action.kind.value}: {message}")
        data: dict[str, object] = {"action": action.kind.value}
        if outcome:
            data["outcome"] = outcome
        if action.host_id is not None:
            data["host_id"] = action.host_id
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


def _bid(offer_type: str, max_bid: float | None, choice: OfferChoice) -> float | None:
    if offer_type != "bid":
        return None
    return max_bid if max_bid is not None else choice.dph_total


def _require(value: T | None) -> T:
    if value is None:
        raise ValueError("a plan action is missing a field the executor needs")
    return value
