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
    a refused resume of a saved identity   ENDINGS["resume 403"]

and the deliberate stop (DESIGN.md 10): the head's answer to the report of a TERM decides whether
the worker keeps its disk and exits (KEEPS) or destroys (DESTROYS), and a boot with a saved
identity resumes instead of enrolling (test_a_saved_identity_resumes_instead_of_enrolling, ...).
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
from agent.commands import (
    Command,
    DestroySelf,
    Exit,
    ForgetIdentity,
    Log,
    SaveIdentity,
    SendEnroll,
    SendHeartbeat,
    SendReport,
    SendResume,
    StartRay,
    StopRay,
    WakeAt,
)
from agent.events import (
    BootstrapError,
    DestroyAnswered,
    EnrollAnswered,
    EnrollFailed,
    Event,
    HeartbeatAnswered,
    HeartbeatFailed,
    IdentitySaved,
    RayExited,
    ReportDone,
    ResumeAnswered,
    ResumeFailed,
    Signalled,
    Started,
    Tick,
)
from agent.state import CONFIRMED, KEEPING, STOPPED, WORKER, AgentState, Report, Timings, initial

OK_BEAT = {"ok": True, "heartbeat_interval_seconds": 30.0, "worker_gives_up_after_seconds": 300.0}
CERTIFICATE = {"cert_pem": "-----BEGIN CERTIFICATE-----x", "key_pem": "k", "ca_pem": "c"}
ANSWER: dict[str, Any] = {
    "record_id": "i7",
    "slot_id": "q1s1",
    "certificate": CERTIFICATE,
    "heartbeat": {"url": "https://h:7001/heartbeat"},
    "ray": {"head_address": "h:6379"},
    "thresholds": {"heartbeat_interval_seconds": 30.0, "worker_gives_up_after_seconds": 300.0},
}
RESUMED = {k: v for k, v in ANSWER.items() if k != "certificate"} | {"resumed": True}
DELIBERATE = {"ok": True, "deliberate_stop": True}
NOT_STARTED = {"error": "resume_refused", "message": "record i7 is meant to be stopped"}
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
    resume: Callable[[float], Event] = lambda now: ResumeAnswered(200, RESUMED)
    save: Callable[[float], Event] = lambda now: IdentitySaved(True)


@dataclass
class Run:
    """A driver on a virtual clock: executes commands, answers them from `world` at once, feeds
    `Tick` at each `WakeAt`, and injects the events scheduled with `at`."""

    world: World = field(default_factory=World)
    timings: Timings = field(default_factory=Timings)
    now: float = 0.0
    saved: dict[str, Any] | None = None  # the identity on the disk at boot
    state: AgentState = field(init=False)
    trace: list[tuple[float, Command]] = field(default_factory=list)
    wake: float | None = None
    _queue: deque[Event] = field(default_factory=deque)
    _scheduled: list[tuple[float, int, Event]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.state = initial(self.timings, started=self.now, record_id="i7", saved=self.saved)
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
        elif isinstance(command, SendResume):
            answer = w.resume(self.now)
        elif isinstance(command, SaveIdentity):
            answer = w.save(self.now)
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

    def report(self) -> Report:
        reports: set[Report] = {c.report for c in self.commands(SendReport)}
        (sent,) = reports
        return sent

    def order(self) -> list[str]:
        """The ending's commands, in order, each kind once."""
        seen: list[str] = []
        for _, c in self.trace:
            name = type(c).__name__
            ending = (SendReport, StopRay, DestroySelf, SaveIdentity, Exit)
            if isinstance(c, ending) and name not in seen:
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
    "resume 403": Ending(
        lambda: Run(
            World(resume=lambda now: ResumeAnswered(403, NOT_STARTED)), saved=dict(ANSWER)
        ).run_until(60),
        "resume_refused",
        "resume_refused",
        "worker",  # it was one: a boot that resumes reports as the worker it was
        0,
    ),
    "no resume": Ending(
        lambda: Run(
            World(resume=lambda now: ResumeFailed("connection refused")), saved=dict(ANSWER)
        ).run_until(700),
        "no_enrollment",
        "not resumed within 600s (last: connection refused",
        "worker",
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
    stops = ["StopRay"] if run.commands(StartRay) else []
    assert run.order() == ["SendReport", *stops, "DestroySelf"]
    assert run.times(DestroySelf)[0] == ending.at
    assert run.state.phase == CONFIRMED
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
        "resume_refused",
    }


# --- timings ---------------------------------------------------------------------------------


def test_a_worker_heartbeats_every_30_seconds_from_its_enrollment() -> None:
    run = Run(now=1000.0).run_until(1000.0 + 185)
    assert run.times(StartRay) == [1000.0]
    assert run.times(SendHeartbeat) == [1000.0 + 30 * k for k in range(7)]
    assert [c.seq for c in run.commands(SendHeartbeat)] == list(range(1, 8))
    assert run.state.phase == WORKER and run.commands(SendReport) == []


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
    state = initial(Timings(), started=0.0)
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
    assert run.state.phase == CONFIRMED
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
    assert run.state.phase == WORKER and run.commands(SendReport) == []
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
    state = initial(Timings(), started=0.0)
    state, _ = lifecycle.step(state, Started(2, 0), 0.0)
    for late in (HeartbeatAnswered(403, UNKNOWN), ReportDone(200), DestroyAnswered(True)):
        assert lifecycle.step(state, late, 1.0) == (state, [WakeAt(0.0 + 600.0)])


def test_a_tick_before_anything_is_due_changes_nothing() -> None:
    run = Run().run_until(10)
    before = run.state
    assert lifecycle.step(before, Tick(), 11.0) == (before, [WakeAt(30.0)])


@pytest.mark.parametrize("module", ["lifecycle", "events", "commands", "state"])
def test_the_machine_does_no_io_and_reads_no_clock(module: str) -> None:
    tree = ast.parse(Path(lifecycle.__file__).with_name(f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "dataclasses", "collections", "typing", "agent"}


# --- a deliberate stop keeps the disk; a saved identity resumes ----------------------------------


def term_at_100(report: Callable[[float], Event | None], **world: Any) -> Run:
    return Run(World(report=report, **world)).at(100.0, Signalled("SIGTERM")).run_until(200)


# The head's answer to the report of a TERM to a worker, and what the worker does then.
KEEPS = {
    "deliberate stop": lambda: term_at_100(lambda now: ReportDone(200, DELIBERATE)),
    "INT, deliberate": lambda: (
        Run(World(report=lambda now: ReportDone(200, DELIBERATE)))
        .at(100.0, Signalled("INT"))
        .run_until(200)
    ),
}
DESTROYS = {
    "a plain ok": lambda: term_at_100(lambda now: ReportDone(200, {"ok": True})),
    "no answer": lambda: term_at_100(lambda now: ReportDone(None, error="timed out")),
    "never returns": lambda: term_at_100(lambda now: None),
    "deliberate false": lambda: term_at_100(
        lambda now: ReportDone(200, {"ok": True, "deliberate_stop": False})
    ),
    "a 403 that says deliberate": lambda: term_at_100(lambda now: ReportDone(403, DELIBERATE)),
    "a 5xx that says deliberate": lambda: term_at_100(lambda now: ReportDone(503, DELIBERATE)),
    "deliberate, but Ray exited": lambda: (
        Run(World(report=lambda now: ReportDone(200, DELIBERATE)))
        .at(100.0, RayExited(1))
        .run_until(200)
    ),
    "deliberate, but heartbeats refused": lambda: Run(
        World(
            report=lambda now: ReportDone(200, DELIBERATE),
            heartbeat=lambda now, seq: HeartbeatAnswered(403, UNKNOWN),
        )
    ).run_until(200),
    "deliberate, to a candidate": lambda: (
        Run(
            World(
                enroll=lambda now: EnrollFailed("refused"),
                report=lambda now: ReportDone(200, DELIBERATE),
            )
        )
        .at(3.0, Signalled("TERM"))
        .run_until(60)
    ),
    "deliberate, the disk cannot keep it": lambda: term_at_100(
        lambda now: ReportDone(200, DELIBERATE),
        save=lambda now: IdentitySaved(False, "No space left on device"),
    ),
}


@pytest.mark.parametrize("case", list(KEEPS))
def test_the_heads_deliberate_stop_keeps_the_disk_and_exits_without_destroying(case: str) -> None:
    run = KEEPS[case]()
    assert run.order() == ["SendReport", "StopRay", "SaveIdentity", "Exit"]
    assert run.commands(DestroySelf) == []
    assert run.times(Exit) == [100.0] and run.commands(Exit) == [Exit(0)]
    assert run.state.phase == STOPPED and run.state.kept_disk
    (kept,) = run.commands(SaveIdentity)
    assert kept.identity["certificate"] == CERTIFICATE  # what the next boot resumes with
    assert kept.identity["record_id"] == "i7"
    assert run.wake is None  # nothing is due: PID 1 is gone


@pytest.mark.parametrize("case", list(DESTROYS))
def test_every_other_answer_destroys_as_the_seed_says(case: str) -> None:
    run = DESTROYS[case]()
    assert run.commands(Exit) == []
    assert run.commands(DestroySelf), "no destroy"
    assert run.state.phase == CONFIRMED and not run.state.kept_disk
    assert run.order()[0] == "SendReport"
    assert run.order().count("StopRay") <= 1  # Ray is stopped once, whatever came first
    if case != "deliberate, the disk cannot keep it":
        assert run.commands(SaveIdentity) == []


def test_a_saved_identity_resumes_instead_of_enrolling() -> None:
    run = Run(saved=dict(ANSWER), now=1000.0).run_until(1000.0 + 65)
    assert run.commands(SendEnroll) == []
    assert run.times(SendResume) == [1000.0]
    # the resume is taken: the identity is forgotten first (a later restart enrolls, and the
    # head refuses it as a second enrollment), then Ray starts with the kept certificate
    kinds = [type(c).__name__ for _, c in run.trace if not isinstance(c, (Log, WakeAt))]
    assert kinds[:3] == ["SendResume", "ForgetIdentity", "StartRay"]
    (start,) = run.commands(StartRay)
    assert start.answer["certificate"] == CERTIFICATE and start.answer["resumed"] is True
    assert run.times(SendHeartbeat) == [1000.0, 1030.0, 1060.0]
    assert run.state.phase == WORKER and run.state.saved is None


def test_a_resume_that_is_not_answered_is_tried_again_as_an_enrollment_is() -> None:
    answers = iter([ResumeFailed("timed out"), ResumeAnswered(503, NOT_READY)])
    run = Run(
        World(resume=lambda now: next(answers, ResumeAnswered(200, RESUMED))), saved=dict(ANSWER)
    ).run_until(30)
    assert run.times(SendResume) == [0.0, 5.0, 10.0]
    assert run.state.phase == WORKER and len(run.commands(ForgetIdentity)) == 1


def test_a_deliberate_stop_while_resuming_keeps_the_saved_identity() -> None:
    run = Run(
        World(
            resume=lambda now: ResumeFailed("timed out"),
            report=lambda now: ReportDone(200, DELIBERATE),
        ),
        saved=dict(ANSWER),
    )
    run.at(12.0, Signalled("TERM")).run_until(60)
    assert run.report().phase == "worker" and run.report().reason == "signal"
    (kept,) = run.commands(SaveIdentity)
    assert kept.identity["certificate"] == CERTIFICATE
    assert run.commands(StopRay) == []  # Ray never started in this boot
    assert run.commands(Exit) == [Exit(0)] and run.commands(DestroySelf) == []


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in ANSWER.items() if k != "certificate"},
        {**ANSWER, "certificate": {**CERTIFICATE, "key_pem": ""}},
        {k: v for k, v in ANSWER.items() if k != "heartbeat"},
        {**ANSWER, "record_id": ""},
    ],
)
def test_a_saved_identity_a_resume_cannot_use_is_not_used(broken: dict[str, Any]) -> None:
    run = Run(saved=broken).run_until(10)
    assert run.commands(SendResume) == [] and run.times(SendEnroll) == [0.0]


def test_signals_while_keeping_the_disk_change_nothing() -> None:
    saves: list[float] = []

    def slow_save(now: float) -> Event | None:
        saves.append(now)
        return None  # the driver has not answered yet

    run = term_at_100(lambda now: ReportDone(200, DELIBERATE), save=slow_save)
    assert run.state.phase == KEEPING
    run.feed(Signalled("SIGTERM"))
    run.feed(RayExited(0))
    assert run.state.phase == KEEPING and saves == [100.0]
    run.feed(IdentitySaved(True))
    assert run.state.phase == STOPPED and run.commands(Exit) == [Exit(0)]
    assert run.commands(DestroySelf) == []
