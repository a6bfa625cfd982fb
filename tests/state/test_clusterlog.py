"""A cluster's log writes the log line and the ledger line in one call (kopf's object logger)."""

from __future__ import annotations

import logging

import pytest

from reconciler.state.clusterlog import ClusterLog
from reconciler.state.ledger import LedgerEvent, LedgerKind


class Sink:
    def __init__(self) -> None:
        self.events: list[LedgerEvent] = []

    def append(self, event: LedgerEvent) -> None:
        self.events.append(event)


def test_a_note_is_one_log_line_and_one_ledger_line(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    cluster = ClusterLog("alpha", sink, logging.getLogger("ray_vast"))
    with caplog.at_level(logging.INFO, logger="ray_vast"):
        cluster.note(
            logging.INFO, "tick_recovered", "ticks again", record="i1", data={"attempts": 2}
        )
        cluster.say(logging.WARNING, "tick_failed", "failed again")  # the log alone
    (event,) = sink.events
    assert (event.cluster, event.kind, event.class_, event.message) == (
        "alpha",
        LedgerKind.NOTE,
        "tick_recovered",
        "ticks again",
    )
    assert event.record == "i1" and dict(event.data) == {"attempts": 2}
    first, second = caplog.records
    assert first.getMessage() == "alpha: ticks again"
    assert (first.cluster, first.cls, first.record) == ("alpha", "tick_recovered", "i1")  # type: ignore[attr-defined]
    assert second.getMessage() == "alpha: failed again"
