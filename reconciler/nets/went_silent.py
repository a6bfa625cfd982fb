"""Went silent: a worker that reported, then stopped (60 s cadence).

Its gate reads the worker's own report clock and deliberately nothing else: the provider's listing
and our probe stay warm while the process being paid for is dead. The threshold has a hard floor in
the spec so a misconfiguration cannot end healthy machines mid-request.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.model.records import InstanceRecord
from reconciler.nets.base import NetResult, Specs, serving_workers
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal

CLASS = "went_silent"


def run(records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float) -> NetResult:
    result = NetResult()
    for record in serving_workers(records):
        spec = specs.get(record.cluster)
        last = last_heard(record)
        if spec is None or last is None:
            continue
        limit = spec.watchdogs.went_silent_after_seconds
        if now - last < limit:
            continue
        why = refusal(record, lineage=lineage, now=now, gate=Gate(limit, heartbeat_net=True))
        if why is not None:
            result.refusals.append((record.id, why.value))
            continue
        result.detections.append(
            Detection(
                record.id,
                CLASS,
                f"no report for {now - last:.0f}s (limit {limit}s)",
                record.vast_id,
            )
        )
    return result


def last_heard(record: InstanceRecord) -> float | None:
    """Where the silence is counted from: the worker's last report (its enrollment before one),
    or the head's start of it after a deliberate stop, whichever is later (a worker that was
    stopped has been silent all the while: its clock starts again when it is started)."""
    last = record.self_report_at or record.enrolled_at
    start = record.start_requested_at
    if last is None or start is None:
        return last
    return max(last, start)
