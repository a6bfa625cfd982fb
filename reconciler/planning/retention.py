"""Forgetting: records of machines ended long ago leave the state; the ledger keeps their story.

Every save writes the whole state, and the head saves on every heartbeat, so a state that keeps
every record it ever had grows slower to save with every rental (measured by the fleet benchmark:
a heartbeat save took 5 ms with no ended records and 680 ms with 3,000). Ended machines and closed
requests are dropped once they are older than the retention; nothing live is ever dropped. The
bill of each dropped machine goes to the ledger first (`bills`), so `ray-vast cost` still prices it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from reconciler import settings
from reconciler.model import cost
from reconciler.model.records import InstanceRecord, Records
from reconciler.model.requestrecord import RequestStatus


def prune(records: Records, now: float, retention: float = settings.RETENTION_SECONDS) -> Records:
    cutoff = now - retention
    instances = {
        rid: r
        for rid, r in records.instances.items()
        if r.live or (r.ended_at if r.ended_at is not None else r.created_at) > cutoff
    }
    requests = {
        qid: q
        for qid, q in records.requests.items()
        if q.status is RequestStatus.OPEN
        or q.placed_at > cutoff
        or any(s.worker in instances for s in q.slots)
    }
    if len(instances) == len(records.instances) and len(requests) == len(records.requests):
        return records
    return replace(records, instances=instances, requests=requests)


@dataclass(frozen=True)
class Bill:
    """The bill of a record that leaves the state, for the ledger."""

    record: InstanceRecord
    dollars: float
    entry: dict[str, Any]  # `cost.bill_entry`: what `ray-vast cost` reads back

    @property
    def message(self) -> str:
        return (
            f"instance {self.record.vast_id} ended a day ago: its bill (${self.dollars:.4f}) "
            "leaves the state and is kept here"
        )


def bills(before: Records, after: Records) -> list[Bill]:
    """The bills of the records `prune` dropped from `before`, in record order."""
    out = []
    for rid, record in sorted(before.instances.items()):
        life = cost.life_of(record) if rid not in after.instances else None
        if life is None:
            continue
        charges = cost.charges([life], since=None, until=life.end or 0.0)
        out.append(Bill(record, sum(c.dollars for c in charges), dict(cost.bill_entry(life))))
    return out
