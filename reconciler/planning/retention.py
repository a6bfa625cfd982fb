"""Forgetting: records of machines ended long ago leave the state; the ledger keeps their story.

Every save writes the whole state, and the head saves on every heartbeat, so a state that keeps
every record it ever had grows slower to save with every rental (measured by the fleet benchmark:
a heartbeat save took 5 ms with no ended records and 680 ms with 3,000). Ended machines and closed
requests are dropped once they are older than the retention; nothing live is ever dropped.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Records, RequestStatus

RETENTION_SECONDS = 24 * 3600.0


def prune(records: Records, now: float, retention: float = RETENTION_SECONDS) -> Records:
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
