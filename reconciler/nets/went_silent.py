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
        last = record.self_report_at or record.enrolled_at
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
