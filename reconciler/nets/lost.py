"""Lost: all three liveness channels cold together (60 s cadence). Marks, never destroys.

The provider's listing showing it running (`provider_ok_at`), our control-plane probe, and the
worker's own report. When all three are older than the threshold the machine is marked lost and no
longer routed to; the fault may be in the path rather than the machine. A warm channel clears the
mark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from reconciler.model.records import InstanceRecord
from reconciler.nets.base import NetResult, Specs, serving_workers
from reconciler.nets.detection import Detection

CLASS = "lost"


def run(records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float) -> NetResult:
    result = NetResult()
    for record in serving_workers(records):
        spec = specs.get(record.cluster)
        if spec is None or record.managed_by != lineage:
            continue
        limit = spec.watchdogs.lost_after_seconds
        channels = (record.provider_ok_at, record.probe_ok_at, record.self_report_at)
        cold = all(seen is None or now - seen >= limit for seen in channels)
        if cold and not record.lost:
            result.updates[record.id] = replace(record, lost=True)
            result.detections.append(
                Detection(
                    record.id, CLASS, f"no channel heard from it for {limit}s", record.vast_id
                )
            )
        elif not cold and record.lost:
            result.updates[record.id] = replace(record, lost=False)
    return result
