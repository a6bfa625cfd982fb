"""A plan is inert data: what to do, to which record, why, and what it does to $/h.

`reason` is a ledger class: it explains the action to people and routes it in the ledger, but the
executor never branches on it (Terraform's ActionReason rule). The executor reads only `kind` and
the fields that say what to call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from reconciler.model.changes import Changes
from reconciler.model.diagnostics import Diagnostic
from reconciler.model.records import Alert, InstanceRecord


@dataclass(frozen=True)
class Detection:
    """What a net or a listing check noticed about one machine (or request): a ledger class and
    the facts behind it. The routing table turns it into actions."""

    record: str
    cls: str
    detail: str
    vast_id: int | None = None
    cluster: str | None = None  # needed when there is no record to tell it (an orphan)


FORMAT_VERSION = "1.0"


class ActionKind(StrEnum):
    RENT = "rent"
    DESTROY = "destroy"
    STOP = "stop"
    START = "start"
    ADOPT = "adopt"
    FORGET = "forget"
    BLOCKLIST = "blocklist"
    PAUSE = "pause"
    MARK_LOST = "mark-lost"


# Actions that call the provider, and so need intent recorded before them.
PROVIDER_ACTIONS = frozenset(
    {ActionKind.RENT, ActionKind.DESTROY, ActionKind.STOP, ActionKind.START}
)


@dataclass(frozen=True)
class OfferChoice:
    """The offer a rent expects to take; the executor re-checks it right before renting."""

    offer_id: int
    machine_id: int
    host_id: int
    dph_total: float
    storage_dph: float
    gpu_name: str | None
    num_gpus: int | None
    reliability: float | None
    geolocation: str | None


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    cluster: str
    reason: str
    detail: str = ""
    node_type: str | None = None
    record: str | None = None
    vast_id: int | None = None
    request: str | None = None
    slot: str | None = None
    label: str | None = None
    offer: OfferChoice | None = None
    host_id: int | None = None
    until: float | None = None
    dph_delta: float = 0.0

    @classmethod
    def on(
        cls, kind: ActionKind, record: InstanceRecord, reason: str, detail: str, dph: float
    ) -> Action:
        """An action on one machine, naming it every way the executor and the ledger need."""
        return cls(
            kind,
            record.cluster,
            reason,
            detail,
            node_type=record.node_type,
            record=record.id,
            vast_id=record.vast_id,
            request=record.request_id,
            label=record.label,
            host_id=record.host_id,
            dph_delta=dph,
        )


@dataclass(frozen=True)
class SkippedOffer:
    cluster: str
    node_type: str
    offer_id: int
    host_id: int
    dph_total: float
    why: str


@dataclass(frozen=True)
class Foreign:
    """An instance labelled for one of our clusters by another state: shown, never acted on."""

    cluster: str
    vast_id: int
    label: str
    dph_total: float
    actual_status: str | None


@dataclass(frozen=True)
class Unmet:
    """Candidates a request wanted that no offer at hand could supply."""

    cluster: str
    node_type: str
    count: int


@dataclass(frozen=True)
class ClusterCost:
    cluster: str
    before: float
    after: float
    cap: float


@dataclass(frozen=True)
class Plan:
    created_at: float
    lineage: str
    serial: int
    listing_fingerprint: str
    actions: tuple[Action, ...]
    costs: tuple[ClusterCost, ...]
    skipped: tuple[SkippedOffer, ...] = ()
    foreign: tuple[Foreign, ...] = ()
    # What stopped the plan (errors), what it left alone for a person (warnings), and what it did
    # not do and why (notes): typed, each with a code (model/diagnostics.py).
    diagnostics: tuple[Diagnostic, ...] = ()
    unmet: tuple[Unmet, ...] = ()
    # What the checks behind the actions noticed; the ledger keeps each one before its actions.
    detections: tuple[Detection, ...] = ()
    # The alerts for a person this plan raised (in `changes` too; the log says them).
    alerts: tuple[Alert, ...] = ()
    # The plan's bookkeeping (refresh, requests placed, blocklist, breaker, alerts, records
    # forgotten) as changes the executor applies before any provider action (model/changes.py).
    changes: Changes = field(default_factory=Changes)
    format_version: str = field(default=FORMAT_VERSION)

    @property
    def has_changes(self) -> bool:
        return bool(self.actions)

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return self._of("error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return self._of("warning")

    @property
    def notes(self) -> tuple[Diagnostic, ...]:
        return self._of("note")

    @property
    def errored(self) -> bool:
        return bool(self.errors)

    def _of(self, severity: str) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == severity)

    def count(self, kind: ActionKind) -> int:
        return sum(1 for a in self.actions if a.kind is kind)
