"""The create path: renting one candidate for one slot of a request, at vast.

A rent saves its pending record (with the label the create will carry) before the call, so a
crash or a lost answer leaves the instance findable by that label: a lost create answer is looked
up in the listing and adopted, never rented again, and a create vast refused but that left an
instance behind is recorded so that it is destroyed. When the planned offer is gone by the time
of the call, the offers are searched again right then (once a node type in one run: later
replacements pick from that search, less the offers tried) and the next acceptable one under the
cluster's cap is tried (`RENT_ATTEMPTS` in all). The offer is chosen by the planner's own rules
(`planning/offers.py`); nothing here decides whether to rent at all.
"""

from __future__ import annotations

from reconciler.applying.search import offer_search
from reconciler.applying.steps import Skip, Steps, put, require
from reconciler.model.plan import Action, OfferChoice
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.spec import ClusterSpec
from reconciler.planning import offers as offer_picking
from reconciler.state.ledger import LedgerKind
from reconciler.vast import errors as vast_errors

# How many offers a rent tries after its planned one is gone, before giving up this run.
RENT_ATTEMPTS = 5


class Renting(Steps):
    """The rent action of the executor, on the steps every action is made of."""

    def _rent(self, action: Action) -> None:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[action.node_type or ""]
        choice = require(action.offer)
        self._before_deadline(action)
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
            now = self.now()
            self._become(record.id, lambda r: r.closed(now, "no offer could be rented"))
        finally:
            self.inflight.release(key)
        raise vast_errors.VastOfferGoneError(
            f"no acceptable offer could be rented for {action.cluster}/{action.node_type}",
            operation="create",
        )

    def _before_deadline(self, action: Action) -> None:
        """A candidate whose request's provision deadline passed while the creates before it
        waited their turn at vast's pace is not rented: its request expires and its slots end
        with it, so it would be rented to be ended (`Skip`, nothing called)."""
        request = self.records.requests.get(action.request or "")
        if request is not None and self.now() >= request.provision_deadline:
            self._log(
                action,
                LedgerKind.OUTCOME,
                f"not rented: request {request.id}'s provision deadline passed before its turn",
                outcome="skipped",
            )
            raise Skip(f"request {request.id}'s provision deadline passed")

    def _pending_record(
        self, action: Action, spec: ClusterSpec, choice: OfferChoice
    ) -> InstanceRecord:
        """The record of the create about to happen, saved before the call (rule: intent first)."""
        node_type = spec.node_types[action.node_type or ""]
        record = InstanceRecord(
            id=require(action.record),
            cluster=action.cluster,
            node_type=node_type.name,
            managed_by=self.journal.lineage,
            label=require(action.label),
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
        self.journal.update(lambda records: put(records, record))
        return record

    def _try_create(self, action: Action, record: InstanceRecord, choice: OfferChoice) -> bool:
        spec = self.specs[action.cluster]
        node_type = spec.node_types[record.node_type]
        bid = _bid(node_type.offer.type, node_type.offer.max_bid_dollars_per_hour, choice)
        request = self.launcher.create_request(spec, node_type, record, bid=bid)
        self.tried.add(choice.offer_id)
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
            now = self.now()
            self._become(record.id, lambda r: r.closed(now, "offer gone"))
            return False
        except vast_errors.CreateLeftInstanceError as exc:
            self._adopt_refused(action, record, exc)
            raise
        except vast_errors.CreateOutcomeUnknownError:
            self._resolve_unknown(action, record)
            return True
        # vast bills an interruptible rental at its bid (and its storage), not the offer's price
        billed = choice.dph_total if bid is None else bid + choice.storage_dph
        vast_id = created.instance_id
        rented = self._become(record.id, lambda r: r.rented(vast_id, dph_total=billed))
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
            self._become(record.id, lambda r: r.rented(found))
            message = f"create response lost; adopted instance {found} by its label"
        else:
            message = "create response lost and the label is not listed yet; kept pending"
        self._log(action, LedgerKind.OUTCOME, message, outcome="unknown", instance=found)

    def _adopt_refused(
        self, action: Action, record: InstanceRecord, exc: vast_errors.CreateLeftInstanceError
    ) -> None:
        """vast refused the create but left an instance: record it so it is destroyed."""
        why = "create refused but left an instance"
        self._become(record.id, lambda r: r.doomed(vast_id=exc.instance_id, ended_reason=why))
        self._log(action, LedgerKind.OUTCOME, str(exc), outcome="refused", instance=exc.instance_id)

    def _replacement(
        self, spec: ClusterSpec, node_type_name: str, failed: InstanceRecord
    ) -> OfferChoice | None:
        """The next acceptable offer under the cap, from a search made right now (the first time
        in this run that the node type's planned offer was gone; later ones reuse it), less the
        offers tried in this run and those its other rents were planned on."""
        node_type = spec.node_types[node_type_name]
        key = (spec.name, node_type_name)
        if key not in self.searched:
            self.searched[key] = list(
                self._vast(lambda: self.provider.search_offers(offer_search(node_type)))
            )
        taken = self.tried | self.planned
        offers = [o for o in self.searched[key] if o.id not in taken]
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


def _bid(offer_type: str, max_bid: float | None, choice: OfferChoice) -> float | None:
    if offer_type != "bid":
        return None
    return max_bid if max_bid is not None else choice.dph_total
