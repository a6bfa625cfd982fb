"""`ray-vast up`'s live view: one line per cluster when its picture changes, and each detection."""

from __future__ import annotations

import logging

import pytest

from reconciler.model.plan import Detection
from reconciler.model.records import Phase, Role
from reconciler.up import LiveView
from reconciler.watch.controller import TickReport
from tests.planning.builders import NOW, record, records


def test_a_line_when_the_picture_changes_and_not_otherwise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.liveview")
    view = LiveView(logger)
    cand = record("i1", vast_id=1)
    worker = record("i2", vast_id=2, role=Role.WORKER, phase=Phase.ENROLLED, lost=True)
    with caplog.at_level(logging.INFO, logger="test.liveview"):
        view.show(TickReport(NOW, records=records(cand, worker)))
        view.show(TickReport(NOW + 1, records=records(cand, worker)))
        view.show(
            TickReport(
                NOW + 2,
                detections=[Detection("i1", "enrollment_timeout", "running 61s")],
                records=records(worker),
            )
        )
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "c1: 1 worker(s), 1 candidate(s), $1.000/h, 1 lost",
        "detected enrollment_timeout on i1: running 61s",
        "c1: 1 worker(s), 0 candidate(s), $0.500/h, 1 lost",
    ]
