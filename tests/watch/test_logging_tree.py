"""One logging tree (issue 14): the watch's log setup configures the head's, the vast client's and
its own loggers once; every line is in the chosen format and redacted, and the nets' refusals are
logged at debug with the gate that refused."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from fleetsim.harness import API_KEY, START, fleet
from reconciler.watch import logs as watch_logs
from tests.scenarios.world import M, cluster, run, workers
from vastsim.faults import LIST_ROUTE

SECRET = "acct-secret-in-a-message-5e1a"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    watch_logs.configure("json", stream, [SECRET, API_KEY])
    try:
        yield stream
    finally:
        for name in watch_logs.LOGGERS:
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                if isinstance(handler, watch_logs._OurHandler):
                    logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)
        logging.getLogger(watch_logs.LOGGER).propagate = True


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    text = stream.getvalue()
    assert SECRET not in text and API_KEY not in text
    out = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(x, dict) for x in out)
    return out


def test_the_heads_info_and_the_vast_clients_warnings_are_json_and_redacted(
    json_log: io.StringIO,
) -> None:
    with fleet(cluster("solo", min_workers=1)) as f:
        run(f, START + 5 * M)
        assert len(workers(f, "solo")) == 1
        # a head decision: a stranger's refused handshake (an INFO line, naming a secret)
        f.heads["solo"].refused_handshake("heartbeat", "198.51.100.9", f"no certificate {SECRET}")
        # a vast call retried: the listing answers 503 once
        f.sim.faults.server_error(LIST_ROUTE, count=1, status=503)
        f.client.list_instances()

    lines = _lines(json_log)
    head = [x for x in lines if x["logger"] == "reconciler.head"]
    assert any(
        x["level"] == "info" and "198.51.100.9" in x["message"] and "***" in x["message"]
        for x in head
    ), head
    retries = [x for x in lines if x["logger"] == "reconciler.vast.retry"]
    assert [x["level"] for x in retries] == ["warning"]
    assert "retrying" in retries[0]["message"]
    assert all({"time", "level", "logger", "message"} <= set(x) for x in lines)


def test_net_refusals_are_logged_at_debug_with_the_gate(json_log: io.StringIO) -> None:
    logging.getLogger(watch_logs.LOGGER).setLevel(logging.DEBUG)
    spec = cluster("solo", min_workers=1, watchdogs={"idle_stop_after_seconds": 300})
    with fleet(spec, working=lambda now: False) as f:
        run(f, START + 30 * M)
        assert len(workers(f, "solo")) == 1  # idle, but at min_workers: kept

    refusals = [x for x in _lines(json_log) if x.get("cls") == "refusal"]
    assert refusals
    assert all(x["level"] == "debug" and x["logger"] == "ray_vast" for x in refusals)
    assert {(x["net"], x["gate"]) for x in refusals} >= {("auto_stop", "at-min-workers")}


def test_a_traceback_is_in_the_json_line_and_redacted(json_log: io.StringIO) -> None:
    try:
        raise RuntimeError(f"a bug quoting {SECRET}")
    except RuntimeError:
        logging.getLogger("ray_vast").exception("alpha: reconcile failed")
    (line,) = _lines(json_log)
    assert line["level"] == "error"
    assert "RuntimeError: a bug quoting ***" in line["traceback"]
