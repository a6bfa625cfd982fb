"""The working copy a plan is built in.

Planning is pure, but building a plan step by step is easier with one mutable scratchpad than with
records threaded through a dozen return values. `Draft` is that scratchpad: it starts from the
refreshed records, takes bookkeeping changes and actions, and is frozen into a `Plan` at the end.
Nothing outside `planning` ever sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.model.diagnostics import Diagnostic, plan_note
from reconciler.model.evolve import evolve
from reconciler.model.plan import Action, ActionKind, SkippedOffer, Unmet
from reconciler.model.recordindex import RecordIndex
from reconciler.model.records import (
    Alert,
    BlockEntry,
    BreakerState,
    InstanceRecord,
    Records,
    breaker_key,
)
from reconciler.model.requestrecord import Request
from reconciler.nets.detection import Detection
from reconciler.planning import alerts


@dataclass
class Draft:
    lineage: str
    now: float
    instances: dict[str, InstanceRecord]
    requests: dict[str, Request]
    blocklist: dict[str, dict[int, BlockEntry]]
    breakers: dict[str, BreakerState]
    records: Records
    next_id: int
    actions: list[Action] = field(default_factory=list)
    # Per rent (its record id), the round of its request's candidates it belongs to: the first
    # candidate of every open slot of every request is sent before any slot's second.
    rounds: dict[str, int] = field(default_factory=dict)
    skipped: list[SkippedOffer] = field(default_factory=list)
    notes: list[Diagnostic] = field(default_factory=list)
    unmet: list[Unmet] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    doomed: set[str] = field(default_factory=set)
    # the records and requests by cluster and node type, over the draft's own mappings: a
    # plan adds no record and moves none, so the index built once serves the whole plan
    index: RecordIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.index = RecordIndex(self.instances, self.requests)

    def of_cluster(self, cluster: str) -> list[InstanceRecord]:
        """The cluster's records as the draft has them now (live or not)."""
        return self.index.of_cluster(cluster)

    def of_node_type(self, cluster: str, node_type: str) -> list[InstanceRecord]:
        """The node type's records as the draft has them now (live or not)."""
        return self.index.of_node_type(cluster, node_type)

    def add_request(self, request: Request) -> None:
        """A request the plan places."""
        self.requests[request.id] = request
        self.index.add_request(request)

    @classmethod
    def start(cls, records: Records, *, lineage: str, now: float) -> Draft:
        return cls(
            lineage=lineage,
            now=now,
            instances=dict(records.instances),
            requests=dict(records.requests),
            blocklist={c: dict(e) for c, e in records.blocklist.items()},
            breakers=dict(records.breakers),
            records=records,
            next_id=records.next_id,
        )

    def new_id(self, prefix: str) -> str:
        ident = f"{prefix}{self.next_id}"
        self.next_id += 1
        return ident

    def note(self, code: str, summary: str, subject: str = "") -> None:
        """Say what the plan did not do, and why (a typed note; `code` is what code reads)."""
        self.notes.append(plan_note(code, summary, subject))

    def add(self, action: Action) -> None:
        self.actions.append(action)
        if action.kind is ActionKind.DESTROY and action.record:
            self.doomed.add(action.record)

    def destroy(self, record: InstanceRecord, reason: str, detail: str) -> None:
        """Plan to end a machine, once, whatever number of nets flagged it."""
        self._machine(ActionKind.DESTROY, record, reason, detail, -record.billing_dph)

    def stop(self, record: InstanceRecord, reason: str, detail: str) -> None:
        """Plan to stop a machine (its disk kept): the reversible end."""
        saved = -(record.dph_total - record.storage_dph)
        self._machine(ActionKind.STOP, record, reason, detail, saved)

    def _machine(
        self, kind: ActionKind, record: InstanceRecord, reason: str, detail: str, dph: float
    ) -> None:
        if record.id in self.doomed:
            return
        self.add(Action.on(kind, record, reason, detail, dph))

    def alert(self, cluster: str, found: Detection) -> bool:
        """A person must look; nothing is retried. The same alert is not raised again within
        the one repeat window (planning/alerts.py): the ledger still has every detection.
        Whether it was raised now."""
        concern = alerts.Concern(cluster, found.cls, found.detail, found.record)
        new, _ = alerts.fresh((*self.records.alerts, *self.alerts), [concern], self.now)
        self.alerts += new
        return bool(new)

    def block(
        self,
        cluster: str,
        host_id: int,
        *,
        kind: str,
        seconds: int,
        cls: str,
        why: str,
        node_type: str | None = None,
        digest: str | None = None,
    ) -> None:
        """Skip a host for `seconds`; `kind` is the blocklist reason, `cls` the detection,
        `digest` the configuration of the node type whose candidate failed there."""
        until = self.now + seconds
        current = self.blocklist.setdefault(cluster, {}).get(host_id)
        also: tuple[str, ...] = ()
        if current is not None and current.node_type == node_type:
            known = (current.digest, *current.also)
            also = tuple(d for d in known if d is not None and d != digest)
            if current.until >= until and (digest is None or current.explains(digest)):
                return
            until = max(until, current.until)
            if current.reason == "network":
                kind = "network"  # a network entry keeps its day whatever the configuration
        entry = BlockEntry(host_id, until, kind, node_type, self.now, digest, also)
        self.blocklist[cluster][host_id] = entry
        detail = f"{kind} for {seconds}s: {why}"
        self.add(Action(ActionKind.BLOCKLIST, cluster, cls, detail, host_id=host_id, until=until))

    def breaker(self, cluster: str, node_type: str) -> BreakerState:
        return self.breakers.get(breaker_key(cluster, node_type), BreakerState())

    def set_breaker(self, cluster: str, node_type: str, state: BreakerState) -> None:
        self.breakers[breaker_key(cluster, node_type)] = state

    def update(self, record: InstanceRecord, **changes: object) -> InstanceRecord:
        updated = evolve(record, **changes)
        if record.id not in self.instances or (updated.cluster, updated.node_type) != (
            record.cluster,
            record.node_type,
        ):
            raise ValueError(f"a plan changes records, it does not add or move one: {record.id}")
        self.instances[record.id] = updated
        return updated

    def finish(self) -> Records:
        return evolve(
            self.records,
            instances=dict(self.instances),
            requests=dict(self.requests),
            blocklist={c: dict(e) for c, e in self.blocklist.items()},
            breakers=dict(self.breakers),
            alerts=(*self.records.alerts, *self.alerts),
            next_id=self.next_id,
        )
