"""The agent's decisions, as a table: one case per ending of the seed's table and per timing.

The machine (`agent.lifecycle`) is run here by a tiny driver on a virtual clock whose head and
vast answer as each case scripts them (this is the machine under test, not an agent played for
another test). Times are asserted exactly, so a machine that beats at 31 s, gives up at 301 s, or
destroys before it reports fails.

    no heartbeat success for 300 s         test_a_worker_gives_up_300s_after_its_last_success
    a 403 answer to a heartbeat            ENDINGS["heartbeat 403"]
    a 403 answer to /enroll                ENDINGS["enroll 403"]
    a refused second enrollment            ENDINGS["second enrollment"]
    no enrollment within 10 minutes        test_no_enrollment_within_10_minutes
    Ray exits                              ENDINGS["ray exits"]
    TERM, INT or HUP                       ENDINGS["TERM"], ["INT"], ["HUP"]
    an error in the bootstrap              ENDINGS["bootstrap error"], ["Ray cannot start"]
"""

from __future__ import annotations

import ast
import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent import lifecycle
from agent.lifecycle import (
    AgentState,
    BootstrapError,
    Command,
    DestroyAnswered,
    DestroySelf,
    EnrollAnswered,
    EnrollFailed,
    Event,
    HeartbeatAnswered,
    HeartbeatFailed,
    RayExited,
    ReportDone,
    SendEnroll,
    SendHeartbeat,
    SendReport,
    Signalled,
    Started,
    StartRay,
    StopRay,
    Tick,
    Timings,
    WakeAt,
)

OK_BEAT = {"ok": True, "heartbeat_interval_seconds": 30.0, "worker_gives_up_after_seconds": 300.0}
ANSWER: dict[str, Any] = {
    "record_id": "i7",
    "slot_id": "q1s1",
    "ray": {"head_address": "h:6379"},
    "thresholds": {"heartbeat_interval_seconds": 30.0, "worker_gives_up_after_seconds": 300.0},
}
REFUSED = {"error": "late_candidate", "message": "every slot is settled"}
RESTARTED = {"error": "second_enrollment", "message": "a restarted container is not let in"}
UNKNOWN = {"error": "unknown_worker", "message": "record i7 has ended"}
NOT_READY = {"error": "not_ready", "message": "the head is not enrolling yet"}


def enrolled(now: float) -> Event:
    return EnrollAnswered(200, ANSWER)


@dataclass
class World:
    """How the head and vast answer, by time (and heartbeat seq / destroy attempt)."""

    enroll: Callable[[float], Event] = enrolled
    heartbeat: Callable[[float, int], Event] = lambda now, seq: HeartbeatAnswered(200, OK_BEAT)
    report: Callable[[float], Event | None] = lambda now: ReportDone(200, {"ok": True})
    destroy: Callable[[float, int], Event] = lambda now, n: DestroyAnswered(True, "200")
    ray_starts: bool = True


@dataclass
class Run:
    """A driver on a virtual clock: executes commands, answers them from `world` at once, feeds
    `Tick` at each `WakeAt`, and injects the events scheduled with `at`."""

    world: World = field(default_factory=World)
    timings: Timings = field(default_factory=Timings)
    now: float = 0.0
    state: AgentState = field(init=False)
    trace: list[tuple[float, Command]] = field(default_factory=list)
    wake: float | None = None
    _queue: deque[Event] = field(default_factory=deque)
    _scheduled: list[tuple[float, int, Event]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.state = lifecycle.initial(self.timings, started=self.now, record_id="i7")
        self.feed(Started(cpus=8, gpus=1))

    def at(self, when: float, event: Event) -> Run:
        heapq.heappush(self._scheduled, (when, next(self._seq), event))
        return self

    def feed(self, event: Event) -> None:
        self._queue.append(event)
        while self._queue:
            self.state, commands = lifecycle.step(self.state, self._queue.popleft(), self.now)
            self.wake = None
            for command in commands:
                self.trace.append((self.now, command))
                self._execute(command)

    def _execute(self, command: Command) -> None:
        w = self.world
        answer: Event | None = None
        if isinstance(command, WakeAt):
            self.wake = command.at
        elif isinstance(command, SendEnroll):
            answer = w.enroll(self.now)
        elif isinstance(command, StartRay) and not w.ray_starts:
            answer = BootstrapError("cannot start Ray (ray): [Errno 2] No such file or directory")
        elif isinstance(command, SendHeartbeat):
            answer = w.heartbeat(self.now, command.seq)
        elif isinstance(command, SendReport):
            answer = w.report(self.now)
        elif isinstance(command, DestroySelf):
            answer = w.destroy(self.now, command.attempt)
        if answer is not None:
            self._queue.append(answer)

    def run_until(self, until: float) -> Run:
        while True:
            due = [t for t in (self.wake, self._next_scheduled()) if t is not None]
            when = min(due, default=None)
            if when is None or when > until:
                self.now = until
                return self
            self.now = max(self.now, when)
            if self._scheduled and self._scheduled[0][0] <= self.now:
                self.feed(heapq.heappop(self._scheduled)[2])
            else:
                self.feed(Tick())

    def _next_scheduled(self) -> float | None:
        return self._scheduled[0][0] if self._scheduled else None

    # --- reading the trace -----------------------------------------------------------------

    def times(self, kind: type[Command]) -> list[float]:
        return [t for t, c in self.trace if isinstance(c, kind)]

    def commands(self, kind: type[Command]) -> list[Any]:
        return [c for _, c in self.trace if isinstance(c, kind)]

    def report(self) -> lifecycle.Report:
        reports: set[lifecycle.Report] = {c.report for c in self.commands(SendReport)}
        (sent,) = reports
        return sent

    def order(self) -> list[str]:
        """The ending's commands, in order, each kind once."""
        seen: list[str] = []
        for _, c in self.trace:
            name = type(c).__name__
            if isinstance(c, (SendReport, StopRay, DestroySelf)) and name not in seen:
                seen.append(name)
        return seen


# --- every ending of the table: reason, detail, phase, the time it was decided ---------------


@dataclass(frozen=True)
class Ending:
    run: Callable[[], Run]
    reason: str
    detail: str  # a part of the report's detail
    phase: str  # how far the boot got
    at: float  # when the machine decided (report sent)


OK_BEAT_ANSWER = HeartbeatAnswered(200, OK_BEAT)


def heartbeat_refused() -> Run:
    def beats(now: float, seq: int) -> Event:
        return HeartbeatAnswered(403, UNKNOWN) if now >= 90 else OK_BEAT_ANSWER

    return Run(World(heartbeat=beats)).run_until(200)


ENDINGS: dict[str, Ending] = {
    "heartbeat 403": Ending(heartbeat_refused, "heartbeat_refused", "unknown_worker", "worker", 90),
    "enroll 403": Ending(
        lambda: Run(World(enroll=lambda now: EnrollAnswered(403, REFUSED))).run_until(60),
        "enroll_refused",
        "late_candidate",
        "candidate",
        0,
    ),
    "second enrollment": Ending(
        lambda: Run(World(enroll=lambda now: EnrollAnswered(403, RESTARTED))).run_until(60),
        "second_enrollment",
        "second_enrollment",
        "candidate",
        0,
    ),
    "ray exits": Ending(
        lambda: Run().at(500.0, RayExited(7)).run_until(600),
        "ray_exited",
        "code 7",
        "worker",
        500,
    ),
    "TERM": Ending(
        lambda: Run().at(100.0, Signalled("SIGTERM")).run_until(200),
        "signal",
        "SIGTERM to PID 1",
        "worker",
        100,
    ),
    "INT": Ending(
        lambda: Run().at(100.0, Signalled("INT")).run_until(200),
        "signal",
        "SIGINT to PID 1",
        "worker",
        100,
    ),
    "HUP": Ending(
        lambda: (
            Run(World(enroll=lambda now: EnrollFailed("refused")))
            .at(3.0, Signalled("SIGHUP"))
            .run_until(60)
        ),
        "signal",
        "SIGHUP to PID 1",
        "candidate",
        3,
    ),
    "bootstrap error": Ending(
        lambda: Run().at(45.0, BootstrapError("KeyError: 'ray'")).run_until(100),
        "bootstrap_error",
        "KeyError",
        "worker",
        45,
    ),
    "Ray cannot start": Ending(
        lambda: Run(World(ray_starts=False)).run_until(100),
        "bootstrap_error",
        "cannot start Ray",
        "worker",
        0,
    ),
    "no heartbeat success": Ending(
        lambda: Run(World(heartbeat=lambda now, seq: HeartbeatFailed("timed out"))).run_until(400),
        "no_heartbeat_success",
        "no heartbeat success for 300s (limit 300s)",
        "worker",
        300,
    ),
    "no enrollment": Ending(
        lambda: Run(World(enroll=lambda now: EnrollAnswered(503, NOT_READY))).run_until(700),
        "no_enrollment",
        "not enrolled within 600s (last: 503 not_ready",
        "candidate",
        600,
    ),
}


@pytest.mark.parametrize("case", list(ENDINGS))
def test_every_ending_reports_then_stops_ray_then_destroys(case: str) -> None:
    ending = ENDINGS[case]
    run = ending.run()
    report = run.report()
    assert (report.reason, report.phase) == (ending.reason, ending.phase)
    assert ending.detail in report.detail
    assert run.times(SendReport) == [ending.at]
    assert report.record_id == "i7"
    # report first, then Ray (only when it was started), then the destroy, at the same moment
    stops = ["StopRay"] if ending.phase == "worker" else []
    assert run.order() == ["SendReport", *stops, "DestroySelf"]
    assert run.times(DestroySelf)[0] == ending.at
    assert run.state.phase == lifecycle.CONFIRMED
    if ending.phase == "candidate":
        assert run.commands(StartRay) == [] and run.commands(SendHeartbeat) == []


def test_the_reason_strings_are_the_protocols() -> None:
    assert {e.reason for e in ENDINGS.values()} == {
        "no_heartbeat_success",
        "heartbeat_refused",
        "enroll_refused",
        "second_enrollment",
        "no_enrollment",
        "ray_exited",
        "signal",
        "bootstrap_error",
    }


# --- timings ---------------------------------------------------------------------------------


def test_a_worker_heartbeats_every_30_seconds_from_its_enrollment() -> None:
    run = Run(now=1000.0).run_until(1000.0 + 185)
    assert run.times(StartRay) == [1000.0]
    assert run.times(SendHeartbeat) == [1000.0 + 30 * k for k in range(7)]
    assert [c.seq for c in run.commands(SendHeartbeat)] == list(range(1, 8))
    assert run.state.phase == lifecycle.WORKER and run.commands(SendReport) == []


def test_a_worker_gives_up_300s_after_its_last_success() -> None:
    # the head answers until 100 s; the last success is the beat at 90 s
    run = Run(World(heartbeat=lambda now, seq: beat_until(100.0, now))).run_until(1000)
    assert run.times(SendReport) == [90.0 + 300]
    assert run.report().reason == "no_heartbeat_success"
    # it kept trying every 30 s until then, the last try being the one at 390 s
    assert run.times(SendHeartbeat)[-1] == 390.0


def beat_until(until: float, now: float) -> Event:
    return OK_BEAT_ANSWER if now < until else HeartbeatFailed("connection refused")


def test_a_single_success_restarts_the_300_seconds() -> None:
    def answers(now: float, seq: int) -> Event:
        return OK_BEAT_ANSWER if now in (0.0, 270.0) else HeartbeatFailed("x")

    run = Run(World(heartbeat=answers)).run_until(1000)
    assert run.times(SendReport) == [270.0 + 300]


def test_non_200_answers_are_not_successes() -> None:
    def answers(now: float, seq: int) -> Event:
        return OK_BEAT_ANSWER if now == 0.0 else HeartbeatAnswered(502, "bad gateway")

    run = Run(World(heartbeat=answers)).run_until(1000)
    assert run.times(SendReport) == [300.0]
    assert run.report().reason == "no_heartbeat_success"


def test_no_enrollment_within_10_minutes() -> None:
    run = Run(World(enroll=lambda now: EnrollFailed("connection refused"))).run_until(2000)
    tries = run.times(SendEnroll)
    assert tries[:3] == [0.0, 5.0, 10.0]  # a tenth of the window, at most 5 s
    assert tries[-1] == 595.0 and len(tries) == 120
    assert run.times(SendReport) == [600.0]
    assert run.report().reason == "no_enrollment"
    assert "connection refused" in run.report().detail


def test_the_enrollment_window_runs_from_the_boot_not_from_the_first_attempt() -> None:
    state = lifecycle.initial(Timings(), started=0.0)
    _, commands = lifecycle.step(state, Started(4, 0), 599.0)  # a slow start (the download)
    assert commands == [SendEnroll(timeout=1.0), WakeAt(600.0)]  # no attempt outlives the window
    _, late = lifecycle.step(state, Started(4, 0), 600.0)
    assert isinstance(late[-2], SendReport) and late[-2].report.reason == "no_enrollment"


def test_a_short_window_retries_faster() -> None:
    run = Run(World(enroll=lambda now: EnrollFailed("x")), Timings(candidate_self_destroy=4.0))
    run.run_until(10)
    assert run.times(SendEnroll)[:3] == [0.0, 0.4, 0.8]
    assert run.times(SendReport) == [4.0]


def test_the_report_waits_at_most_10_seconds_for_an_answer() -> None:
    # the head never answers (each attempt fails): resent every 0.2 s, destroyed 10 s later
    run = Run(World(report=lambda now: ReportDone(None, error="timed out")))
    run.at(100.0, Signalled("TERM")).run_until(200)
    tries = run.times(SendReport)
    assert tries[0] == 100.0 and len(tries) in (49, 50)
    assert all(round(b - a, 6) == 0.2 for a, b in itertools.pairwise(tries))
    destroyed = run.times(DestroySelf)[0]
    assert 110.0 - 0.2 - 1e-9 <= destroyed <= 110.0  # at most 10 s after the decision


def test_a_report_that_never_returns_is_given_up_at_10_seconds() -> None:
    run = Run(World(report=lambda now: None)).at(100.0, Signalled("TERM")).run_until(200)
    assert run.times(SendReport) == [100.0]
    assert run.commands(SendReport)[0].timeout == 5.0  # one attempt waits at most 5 s
    assert run.times(DestroySelf)[0] == 110.0


def test_an_answered_report_is_not_waited_for_and_a_4xx_is_an_answer() -> None:
    run = Run(World(report=lambda now: ReportDone(403, {"error": "token_check_failed"})))
    run.at(100.0, Signalled("TERM")).run_until(200)
    assert run.times(SendReport) == [100.0] and run.times(DestroySelf)[0] == 100.0
    assert run.state.report_delivered is False  # answered, but not taken


def test_the_destroy_is_retried_every_5_seconds_until_vast_confirms_and_never_exits() -> None:
    def answers(now: float, attempt: int) -> Event:
        return DestroyAnswered(attempt >= 4, "200" if attempt >= 4 else "no answer")

    run = Run(World(destroy=answers)).at(100.0, Signalled("TERM")).run_until(100.0 + 3600)
    first = run.times(DestroySelf)[:4]
    assert first == [100.0, 105.0, 110.0, 115.0]
    # confirmed on the 4th: asked again every 12 retries (60 s), for as long as PID 1 lives
    later = run.times(DestroySelf)[4:]
    assert later == [175.0 + 60 * k for k in range(59)]  # to 3655 s: the run ends at 3700 s
    assert run.state.phase == lifecycle.CONFIRMED
    assert run.state.confirmed_at == 115.0
    assert run.wake is not None  # it still has something to do: it never exits


def test_the_heads_thresholds_win_over_the_environments() -> None:
    answer = {**ANSWER, "thresholds": {"heartbeat_interval_seconds": 10.0}}
    beat = {"ok": True, "heartbeat_interval_seconds": 10.0, "worker_gives_up_after_seconds": 50}

    def beats(now: float, seq: int) -> Event:
        return HeartbeatAnswered(200, beat) if now < 25 else HeartbeatFailed("timed out")

    world = World(enroll=lambda now: EnrollAnswered(200, answer), heartbeat=beats)
    run = Run(world).run_until(200)
    assert run.times(SendHeartbeat)[:4] == [0.0, 10.0, 20.0, 30.0]
    assert run.times(SendReport) == [20.0 + 50]


# --- what changes nothing --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SIGQUIT", "SIGUSR1", "USR2", "SIGCONT"])
def test_other_signals_change_nothing(name: str) -> None:
    run = Run().at(100.0, Signalled(name)).run_until(400)
    assert run.state.phase == lifecycle.WORKER and run.commands(SendReport) == []
    assert run.times(SendHeartbeat)[-1] == 390.0


def test_nothing_restarts_an_ending_under_way() -> None:
    run = Run(World(destroy=lambda now, n: DestroyAnswered(False, "503")))
    run.at(100.0, Signalled("TERM"))
    run.at(101.0, Signalled("SIGTERM")).at(102.0, BootstrapError("boom")).at(103.0, RayExited(1))
    run.at(104.0, EnrollAnswered(200, ANSWER)).at(105.0, HeartbeatAnswered(403, UNKNOWN))
    run.run_until(130)
    assert run.report().reason == "signal" and run.times(SendReport) == [100.0]
    assert run.times(StartRay) == [0.0]
    assert run.times(DestroySelf) == [100.0 + 5 * k for k in range(7)]


def test_answers_that_come_late_change_nothing() -> None:
    state = lifecycle.initial(Timings(), started=0.0)
    state, _ = lifecycle.step(state, Started(2, 0), 0.0)
    for late in (HeartbeatAnswered(403, UNKNOWN), ReportDone(200), DestroyAnswered(True)):
        assert lifecycle.step(state, late, 1.0) == (state, [WakeAt(0.0 + 600.0)])


def test_a_tick_before_anything_is_due_changes_nothing() -> None:
    run = Run().run_until(10)
    before = run.state
    assert lifecycle.step(before, Tick(), 11.0) == (before, [WakeAt(30.0)])


def test_the_machine_does_no_io_and_reads_no_clock() -> None:
    tree = ast.parse(Path(lifecycle.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "dataclasses", "collections", "typing", "agent"}
