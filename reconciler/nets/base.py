"""What every net shares: its result shape and the records it may look at.

A net is a pure function of records, specs and `now`. It returns detections (routed to actions by
the ledger's table) and record updates that are bookkeeping only (a timer armed, a suspicion noted,
a lost marker). Destroyed records are never given to a net (DESIGN.md rule 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection


@dataclass
class NetResult:
    detections: list[Detection] = field(default_factory=list)
    updates: dict[str, InstanceRecord] = field(default_factory=dict)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (record, refusal) for the log


def scannable(records: Iterable[InstanceRecord]) -> list[InstanceRecord]:
    """Live records only: a destroyed record is never scanned, so nothing re-arms against it."""
    return [r for r in records if r.live and r.intent is not Intent.DESTROYED]


def serving_workers(records: Iterable[InstanceRecord]) -> list[InstanceRecord]:
    return [
        r
        for r in scannable(records)
        if r.role is Role.WORKER
        and r.intent is Intent.RUNNING
        and r.phase in (Phase.ENROLLED, Phase.SERVING, Phase.RUNNING)
    ]


Specs = Mapping[str, ClusterSpec]
