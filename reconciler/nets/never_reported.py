"""Boot failure: a machine that has never reported, past its boot window (60 s cadence).

The window runs from our first observation, never from vast's `start_date`, and covers a cold
image pull. A start-up failure is re-confirmed across ticks before acting: the first tick that sees
it only notes the suspicion; a later tick that still sees it acts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from reconciler.model.records import InstanceRecord
from reconciler.nets.base import NetResult, Specs, scannable
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal

CLASS = "never_reported"


def run(records: Iterable[InstanceRecord], specs: Specs, *, lineage: str, now: float) -> NetResult:
    result = NetResult()
    for record in scannable(records):
        spec = specs.get(record.cluster)
        if spec is None or record.vast_id is None or _has_reported(record):
            continue
        window = spec.watchdogs.never_reported_seconds
        why = refusal(record, lineage=lineage, now=now, gate=Gate(window, heartbeat_net=True))
        if why is not None:
            result.refusals.append((record.id, why.value))
            continue
        if record.boot_suspect_at is None:
            result.updates[record.id] = replace(record, boot_suspect_at=now)
            continue
        age = now - (record.first_observed_at or record.created_at)
        result.detections.append(
            Detection(
                record.id, CLASS, f"never reported in {age:.0f}s (window {window}s)", record.vast_id
            )
        )
    return result


def _has_reported(record: InstanceRecord) -> bool:
    return record.self_report_at is not None or record.enrolled_at is not None
