"""The agent's side of the money chain's stop handshake (DESIGN.md 11; `agent.stopping`), run by
the virtual-clock driver of `test_lifecycle`:

    "stop": "pending" in a heartbeat answer   acknowledged at once (the next heartbeat goes out
                                              now, with "stop": "acknowledged"), and in every
                                              heartbeat after it
    Ray exits while the stop is pending       part of the stop: no ending, heartbeats go on
    TERM while the stop is pending            reported; "deliberate stop" keeps the disk
    "cancelled" (or no word) while pending    the wait ends: the worker serves on; with its Ray
                                              gone it ends as `ray_exited`
    no TERM long after Ray exited for it      `ray_exited` after `worker_gives_up_after`
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agent import messages, stopping
from agent.commands import DestroySelf, Exit, Log, SaveIdentity, SendHeartbeat, SendReport
from agent.events import Event, HeartbeatAnswered, RayExited, ReportDone, Signalled
from agent.state import STOPPED, WORKER

from .test_lifecycle import DELIBERATE, OK_BEAT, Run, World

HEARTBEAT_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "agent-heartbeat.v1.json"
UTILISATION = (
    "sample_seconds",
    "cpu_fraction",
    "load1",
    "memory_used_fraction",
    "net_rx_bytes",
    "net_tx_bytes",
    "gpu_fraction",
)
PENDING = {**OK_BEAT, "stop": "pending"}
CANCELLED = {**OK_BEAT, "stop": "cancelled"}


def answers(*spans: tuple[float, dict[str, Any]]) -> Callable[[float, int], Event]:
    """Heartbeat answers by time: the last span that started at or before `now` answers."""

    def beat(now: float, seq: int) -> Event:
        doc = OK_BEAT
        for start, said in spans:
            if now >= start:
                doc = said
        return HeartbeatAnswered(200, doc)

    return beat


def acks(run: Run) -> list[tuple[float, bool]]:
    return [(t, c.stop_acknowledged) for t, c in run.trace if isinstance(c, SendHeartbeat)]


def logs(run: Run, text: str) -> list[float]:
    return [t for t, c in run.trace if isinstance(c, Log) and text in c.message]


def test_a_pending_stop_is_acknowledged_at_once_and_in_every_heartbeat_after() -> None:
    run = Run(World(heartbeat=answers((60.0, PENDING)))).run_until(200)
    beats = acks(run)
    # 0, 30: no stop; 60 hears "pending" and the acknowledgment goes out at once, then every 30 s
    assert beats == [
        (0.0, False),
        (30.0, False),
        (60.0, False),
        (60.0, True),
        (90.0, True),
        (120.0, True),
        (150.0, True),
        (180.0, True),
    ]
    assert run.state.stop_pending_at == 60.0 and run.state.phase == WORKER
    assert logs(run, "stop pending")


def test_ray_exiting_during_a_pending_stop_is_part_of_it_and_the_term_keeps_the_disk() -> None:
    world = World(
        heartbeat=answers((60.0, PENDING)), report=lambda now: ReportDone(200, DELIBERATE)
    )
    run = Run(world).at(61.0, RayExited(0)).at(66.0, Signalled("SIGTERM")).run_until(200)
    assert run.state.ray_gone_in_stop == 61.0
    assert logs(run, "part of the stop")
    # no ending at Ray's exit: the TERM's report is the one, and the disk is kept
    [report] = run.commands(SendReport)
    assert report.report.reason == "signal" and run.times(SendReport) == [66.0]
    assert run.order() == ["SendReport", "StopRay", "SaveIdentity", "Exit"]
    assert run.commands(DestroySelf) == [] and run.state.phase == STOPPED
    assert isinstance(run.commands(SaveIdentity)[0], SaveIdentity)
    assert run.commands(Exit) == [Exit(0)]


def test_ray_exiting_without_a_pending_stop_is_still_an_ending() -> None:
    run = Run().at(61.0, RayExited(0)).run_until(100)
    assert run.report().reason == "ray_exited" and run.times(SendReport) == [61.0]


def test_a_cancelled_stop_ends_the_wait_and_the_worker_serves_on() -> None:
    run = Run(World(heartbeat=answers((60.0, PENDING), (90.0, CANCELLED)))).run_until(200)
    assert run.state.stop_pending_at is None and run.state.phase == WORKER
    assert logs(run, "stop cancelled") == [90.0]
    assert acks(run)[-3:] == [(120.0, False), (150.0, False), (180.0, False)]
    assert run.commands(SendReport) == []


def test_an_answer_without_a_stop_ends_the_wait_too() -> None:
    run = Run(World(heartbeat=answers((60.0, PENDING), (90.0, OK_BEAT)))).run_until(200)
    assert run.state.stop_pending_at is None
    assert logs(run, "no stop in the head's answer") == [90.0]
    assert run.commands(SendReport) == []


def test_a_stop_cancelled_after_ray_exited_ends_as_ray_exited() -> None:
    beats = answers((60.0, PENDING), (90.0, CANCELLED))
    run = Run(World(heartbeat=beats)).at(70.0, RayExited(0)).run_until(200)
    assert run.report().reason == "ray_exited" and run.times(SendReport) == [90.0]
    assert "stop cancelled after Ray exited" in run.report().detail


def test_no_stop_long_after_ray_exited_for_it_is_an_ending() -> None:
    run = Run(World(heartbeat=answers((60.0, PENDING)))).at(70.0, RayExited(0)).run_until(500)
    # heartbeats go on meanwhile; at worker_gives_up_after past Ray's exit the worker ends
    assert run.report().reason == "ray_exited" and run.times(SendReport) == [370.0]
    assert "no stop came" in run.report().detail


def test_other_words_and_answers_to_other_phases_change_nothing() -> None:
    odd = {**OK_BEAT, "stop": "maybe"}
    run = Run(World(heartbeat=answers((60.0, odd)))).run_until(200)
    assert run.state.stop_pending_at is None and all(not a for _, a in acks(run))
    assert stopping.word(None) is None and stopping.word({"stop": 3}) is None
    assert stopping.word(PENDING) == "pending" and stopping.word(CANCELLED) == "cancelled"


def test_the_heartbeat_says_acknowledged_only_while_waiting_and_the_schema_takes_both() -> None:
    schema = json.loads(HEARTBEAT_SCHEMA.read_text())
    beats = jsonschema.Draft202012Validator(schema)
    answer = jsonschema.Draft202012Validator({**schema, **schema["$defs"]["answer"]})

    class Settings:
        instance_id = 7

    body = messages.heartbeat_body(
        Settings(),  # type: ignore[arg-type]
        record_id="i7",
        boot_id="abcd0001",
        seq=2,
        sent_at=1.0,
        ray={"state": "running", "pid": 1},
        processes={"pids": 3, "pids_limit": None},
        worker_ports={"in_use": [], "total": 2},
        utilisation=dict.fromkeys(UTILISATION),
        stop_acknowledged=True,
    )
    assert body["stop"] == "acknowledged"
    beats.validate(body)
    beats.validate({k: v for k, v in body.items() if k != "stop"})  # not waiting: no word
    with pytest.raises(jsonschema.ValidationError):
        beats.validate({**body, "stop": "pending"})  # the agent only acknowledges
    for doc in (OK_BEAT, PENDING, CANCELLED):
        answer.validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        answer.validate({**OK_BEAT, "stop": "acknowledged"})
