"""The head's drivers are told the demand no node type can serve, with Ray's own event logger,
into the file the head's log monitor publishes (watch/rayevents.py; the whole path with real Ray:
tests/e2e/test_ray_head.py::test_a_demand_no_node_type_serves_is_pending_in_ray_status_and_...)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from reconciler.model.demand import Unmet
from reconciler.watch.rayevents import EVENTS_FILE, REPEAT_AFTER, DriverEvents

TPU = Unmet("task", ({"TPU": 1.0, "CPU": 1.0},), count=2)
GANG = Unmet(
    "placement_group", ({"GPU": 8.0}, {"GPU": 8.0}), placement_group="pg1", strategy="STRICT_PACK"
)


def said(logs: Path) -> list[dict[str, str]]:
    path = logs / EVENTS_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_demand_is_said_as_rays_autoscaler_says_it(tmp_path: Path) -> None:
    events = DriverEvents("c")
    events.infeasible([TPU, GANG], 100.0, lambda: str(tmp_path))
    lines = said(tmp_path)
    assert [e["source_type"] for e in lines] == ["AUTOSCALER", "AUTOSCALER"]
    assert {e["severity"] for e in lines} == {"WARNING"}
    # Ray's words; the shape's keys in the order of Ray's protobuf map (not fixed)
    assert re.fullmatch(
        r"No available node types can fulfill resource requests "
        r"\{('TPU': 1.0, 'CPU': 1.0|'CPU': 1.0, 'TPU': 1.0)\}\*2\. "
        r"Add suitable node types to this cluster to resolve this issue\.",
        lines[0]["message"],
    ), lines[0]["message"]
    assert "placement group" in lines[1]["message"] and "'GPU': 8.0" in lines[1]["message"]


def test_the_same_demand_is_said_again_only_after_30_s_and_a_new_one_at_once(
    tmp_path: Path,
) -> None:
    events = DriverEvents("c")
    logs = lambda: str(tmp_path)  # noqa: E731
    events.infeasible([TPU], 100.0, logs)
    events.infeasible([TPU], 100.0 + REPEAT_AFTER - 1, logs)
    assert len(said(tmp_path)) == 1
    events.infeasible([TPU, GANG], 100.0 + REPEAT_AFTER - 1, logs)  # a new shape: at once
    assert len(said(tmp_path)) == 2
    events.infeasible([TPU, GANG], 100.0 + REPEAT_AFTER, logs)  # the TPU's 30 s are up
    assert len(said(tmp_path)) == 3
    events.infeasible([], 200.0, logs)  # gone ...
    events.infeasible([TPU], 201.0, logs)  # ... and back: said at once
    assert len(said(tmp_path)) == 4


def test_a_head_whose_logs_are_not_here_is_told_nothing_and_a_new_session_gets_its_own_file(
    tmp_path: Path,
) -> None:
    events = DriverEvents("c")
    events.infeasible([TPU], 100.0, lambda: None)  # the head runs on another machine
    first, second = tmp_path / "session_1" / "logs", tmp_path / "session_2" / "logs"
    events.infeasible([TPU], 101.0, lambda: str(first))  # not said yet: said now
    events.infeasible([TPU], 200.0, lambda: str(second))  # the head restarted
    assert len(said(first)) == 1 and len(said(second)) == 1


def test_nothing_unmet_asks_nothing(tmp_path: Path) -> None:
    def never() -> str:
        raise AssertionError("the head's logs were looked up for nothing")

    DriverEvents("c").infeasible([], 100.0, never)


def test_close_lets_go_of_the_file(tmp_path: Path) -> None:
    events = DriverEvents("c")
    events.infeasible([TPU], 100.0, lambda: str(tmp_path))
    handlers = list(events._logger.handlers) if events._logger else []
    events.close()
    assert handlers and all(h.stream is None for h in handlers)  # type: ignore[attr-defined]
