"""The agent's decisions as one pure state machine: `step(state, event, now) -> (state, commands)`.

Why a machine: the same decisions must run in two worlds. The real agent (`agent.watchdog`) feeds
it events from real sockets, a real Ray process and real signals on the monotonic clock; the
virtual-time harness (`fleetsim.agents`) feeds it events from the head's application object and
vastsim on the simulator's clock. Nothing here does I/O or reads a clock, so a test (and the
harness) can hold the agent to the seed's rules without playing it by hand.

The contract lives beside it, as in h11: what the driver saw (`agent.events`), what it must do
(`agent.commands`), one boot's state (`agent.state`), each with the small print of reading it.
Everything that decides a transition lives here: `step`, `wake_at` and every handler.

    Started ----------> candidate --EnrollAnswered(200)--> worker -------+
       |                  |  ^  retry every min(5 s, window/10)           | heartbeat every interval
       |                  +--+  EnrollFailed / 503 / ...                  |
       +-(saved identity)-> resuming --ResumeAnswered(200)--> worker      |
                          |  ^  retried as an enrollment is               |
                          +--+                                            |
    every ending of the seed's table (`agent.state`) <--------------------+
        -> ending:     SendReport, wait for its answer up to report_wait (resent every 0.2 s)
        -> destroying: StopRay, DestroySelf retried every self_destroy_retry until vast confirms
        -> confirmed:  DestroySelf again every CONFIRMED_BACKOFF retries: never exit
        or, when the head answers the report of a TERM with "deliberate stop" (DESIGN.md 10):
        -> keeping:    StopRay, SaveIdentity (the enrollment answer: certificate and key)
        -> stopped:    Exit: PID 1 exits and the container stops, its disk kept

    worker, a heartbeat answer says "stop": "pending" (DESIGN.md 11, `agent.stopping`):
        the stop is pending: a heartbeat goes out at once with "stop": "acknowledged" (and every
        one after it); Ray's exit is part of the stop now (the head drains the node, then calls
        vast's stop, whose TERM ends the boot as above); "cancelled", or an answer without a
        stop, ends the wait: the worker serves on (or, its Ray gone, ends as `ray_exited`)

QUIT, USR1 and USR2 change nothing (the kernel drops them for a PID 1 without handlers); a signal
or an error while already ending changes nothing either: the ending is under way.

Runs on every Python Ray supports (3.9 and up): no `match`, no `X | Y` outside annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from agent import events, stopping
from agent import state as boot
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
    ray_counts,
)
from agent.state import AgentState, Report

ENDING_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
REPORT_RESEND = 0.2  # seconds between report attempts while the head does not answer
REPORT_ATTEMPT_TIMEOUT = 5.0  # one report attempt waits at most this long
# After vast confirmed, ask again this many retry intervals later (a destroy that did not take).
CONFIRMED_BACKOFF = 12


# --- the machine ---------------------------------------------------------------------------------

_Out = tuple[AgentState, list[Command]]


def step(state: AgentState, event: events.Event, now: float) -> tuple[AgentState, list[Command]]:
    """The one decision function: the next state and what the driver must do, in order. The last
    command is the `WakeAt` of the state's next deadline, whenever it has one."""
    state, commands = _handle(state, event, now)
    wake = wake_at(state)
    if wake is not None:
        commands.append(WakeAt(wake))
    return state, commands


def wake_at(state: AgentState) -> float | None:
    """The next time a `Tick` may change something (None: only an event can)."""
    times: list[float | None] = []
    if state.phase in (boot.CANDIDATE, boot.RESUMING) and state.booted:
        times.append(state.enroll_deadline)
        if state.in_flight is None:
            times.append(state.next_enroll)
    elif state.phase == boot.WORKER:
        times.append(state.gives_up_at)
        times.append(state.stop_overdue_at)
        if state.in_flight is None:
            times.append(state.next_beat)
    elif state.phase == boot.ENDING:
        times.append(state.report_deadline)
        if state.in_flight is None:
            times.append(state.next_report)
    elif state.phase in (boot.DESTROYING, boot.CONFIRMED) and state.in_flight is None:
        times.append(state.next_destroy)
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _handle(state: AgentState, event: events.Event, now: float) -> _Out:
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"not an agent event: {event!r}")
    return handler(state, event, now)


def _tick(state: AgentState, now: float) -> _Out:
    if state.phase in (boot.CANDIDATE, boot.RESUMING) and state.booted:
        if now >= state.enroll_deadline:
            window = f"{state.timings.candidate_self_destroy:g}s"
            done = "resumed" if state.phase == boot.RESUMING else "enrolled"
            detail = f"not {done} within {window} (last: {state.last_problem})"
            return _end(state, boot.NO_ENROLLMENT, detail, now)
        if state.in_flight is None and state.next_enroll is not None and now >= state.next_enroll:
            return _try_enroll(state, now)
    elif state.phase == boot.WORKER:
        # a beat that is due goes out first: it may be the success that keeps the worker
        if state.in_flight is None and state.next_beat is not None and now >= state.next_beat:
            return _send_heartbeat(state, now)
        overdue = state.stop_overdue_at
        if overdue is not None and now >= overdue:
            detail = f"Ray exited for the head's stop {now - (state.ray_gone_in_stop or now):.0f}s"
            return _end(state, boot.RAY_EXITED, f"{detail} ago and no stop came", now)
        return _maybe_give_up(state, [], now)
    elif state.phase == boot.ENDING:
        if state.report_deadline is not None and now >= state.report_deadline:
            note = Log("no answer to the report in time; destroying anyway")
            return _begin_destroy(state, [note], now)
        if state.in_flight is None and state.next_report is not None and now >= state.next_report:
            return _send_report(state, [], now)
    elif (
        state.phase in (boot.DESTROYING, boot.CONFIRMED)
        and state.in_flight is None
        and state.next_destroy is not None
        and now >= state.next_destroy
    ):
        return _destroy(state, [], now)
    return state, []


# --- candidate -----------------------------------------------------------------------------------


def _started(state: AgentState, event: events.Started, now: float) -> _Out:
    if state.booted or state.phase != boot.CANDIDATE:
        return state, []
    phase = boot.RESUMING if state.saved is not None else boot.CANDIDATE
    state = dataclasses.replace(state, booted=True, cpus=event.cpus, gpus=event.gpus, phase=phase)
    notes: list[Command] = []
    if phase == boot.RESUMING:
        notes.append(Log(f"a saved identity of {state.record_id}: resuming instead of enrolling"))
    state, commands = _try_enroll(state, now)
    return state, notes + commands


def _try_enroll(state: AgentState, now: float) -> _Out:
    """One attempt to get in: an enrollment, or the resume of a saved identity."""
    left = state.enroll_deadline - now
    if left <= 0:
        return _tick(state, now)
    timeout = min(state.timings.request_timeout, left)
    if state.phase == boot.RESUMING:
        state = dataclasses.replace(state, in_flight="resume", next_enroll=None)
        return state, [SendResume(timeout)]
    state = dataclasses.replace(state, in_flight="enroll", next_enroll=None)
    return state, [SendEnroll(timeout)]


def _enroll_answered(state: AgentState, event: events.EnrollAnswered, now: float) -> _Out:
    if state.phase != boot.CANDIDATE or state.in_flight != "enroll":
        return state, []
    if event.status == 200 and isinstance(event.doc, Mapping):
        return _enrolled(state, event.doc, now)
    if event.status == 403:
        restart = events.error_code(event.doc) == "second_enrollment"
        reason = boot.SECOND_ENROLLMENT if restart else boot.ENROLL_REFUSED
        detail = f"the head refused the enrollment: {events.describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), reason, detail, now)
    return _enroll_not_done(state, events.describe(event.status, event.doc), now)


def _enroll_not_done(state: AgentState, problem: str, now: float) -> _Out:
    """Not enrolled this time (no answer, not ready, a 5xx...): try again after a pause, until
    the enrollment window closes."""
    if state.phase != boot.CANDIDATE or state.in_flight != "enroll":
        return state, []
    retry = min(now + state.timings.enroll_pause, state.enroll_deadline)
    state = dataclasses.replace(state, in_flight=None, last_problem=problem, next_enroll=retry)
    return state, [Log(f"enrollment not done: {problem}")]


# --- resuming: a saved identity ----------------------------------------------------------------


def _resume_answered(state: AgentState, event: events.ResumeAnswered, now: float) -> _Out:
    if state.phase != boot.RESUMING or state.in_flight != "resume":
        return state, []
    saved = state.saved or {}
    if event.status == 200 and isinstance(event.doc, Mapping):
        # the head sends no certificate: the worker goes on with the one it saved
        answer = {**event.doc, "certificate": saved.get("certificate")}
        state, commands = _enrolled(dataclasses.replace(state, saved=None), answer, now)
        forget: list[Command] = [ForgetIdentity()]
        return state, forget + commands
    if event.status == 403:
        detail = f"the head refused the resume: {events.describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), boot.RESUME_REFUSED, detail, now)
    return _resume_not_done(state, events.describe(event.status, event.doc), now)


def _resume_not_done(state: AgentState, problem: str, now: float) -> _Out:
    """Not resumed this time: tried again as an enrollment is, until the window closes."""
    if state.phase != boot.RESUMING or state.in_flight != "resume":
        return state, []
    retry = min(now + state.timings.enroll_pause, state.enroll_deadline)
    state = dataclasses.replace(state, in_flight=None, last_problem=problem, next_enroll=retry)
    return state, [Log(f"resume not done: {problem}")]


def _enrolled(state: AgentState, answer: Mapping[str, Any], now: float) -> _Out:
    """A worker now: Ray starts with the real core count and GPUs, or the ones the node type
    declares (`ray_counts`); the first heartbeat goes out at once (on the next tick, so a Ray
    that cannot start ends the boot before any heartbeat)."""
    resumed = state.phase == boot.RESUMING
    limits = answer.get("thresholds")
    timings = state.timings.retuned(limits if isinstance(limits, Mapping) else {})
    record_id = str(answer.get("record_id") or state.record_id)
    state = dataclasses.replace(
        state,
        phase=boot.WORKER,
        in_flight=None,
        timings=timings,
        record_id=record_id,
        answer=answer,
        ray_started=True,
        last_ok=now,
        next_beat=now,
    )
    slot = answer.get("slot_id", "?")
    cpus, gpus, said = ray_counts(state.cpus, state.gpus, answer)
    how = "resumed" if resumed else "enrolled"
    notes: list[Command] = [Log(f"{how} as {record_id} in slot {slot}")]
    if said:
        notes.append(Log(said))
    return state, [*notes, StartRay(cpus, gpus, answer)]


# --- worker --------------------------------------------------------------------------------------


def _send_heartbeat(state: AgentState, now: float) -> _Out:
    seq = state.seq + 1
    t = state.timings
    state = dataclasses.replace(
        state, seq=seq, in_flight="heartbeat", next_beat=now + t.heartbeat_interval
    )
    timeout = min(t.request_timeout, t.heartbeat_interval)
    return state, [SendHeartbeat(seq, timeout, state.stop_pending_at is not None)]


def _heartbeat_answered(state: AgentState, event: events.HeartbeatAnswered, now: float) -> _Out:
    if state.phase != boot.WORKER or state.in_flight != "heartbeat":
        return state, []
    if event.status == 200:
        limits = event.doc if isinstance(event.doc, Mapping) else {}
        timings = state.timings.retuned_by_heartbeat(limits)
        state = dataclasses.replace(state, in_flight=None, last_ok=now, timings=timings)
        return _stop_word(state, stopping.word(event.doc), now)
    if event.status == 403:
        detail = f"the head refused a heartbeat: {events.describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), boot.HEARTBEAT_REFUSED, detail, now)
    return _heartbeat_not_taken(
        state, f"not taken: {events.describe(event.status, event.doc)}", now
    )


def _heartbeat_not_taken(state: AgentState, problem: str, now: float) -> _Out:
    if state.phase != boot.WORKER or state.in_flight != "heartbeat":
        return state, []
    state = dataclasses.replace(state, in_flight=None)
    return _maybe_give_up(state, [Log(f"heartbeat {state.seq} {problem}")], now)


def _maybe_give_up(state: AgentState, commands: list[Command], now: float) -> _Out:
    gives_up_at = state.gives_up_at
    if state.last_ok is None or gives_up_at is None or now < gives_up_at:
        return state, commands
    limit = f"limit {state.timings.worker_gives_up_after:g}s"
    detail = f"no heartbeat success for {now - state.last_ok:.0f}s ({limit})"
    state, more = _end(state, boot.NO_HEARTBEAT_SUCCESS, detail, now)
    return state, commands + more


def _stop_word(state: AgentState, word: str | None, now: float) -> _Out:
    """A heartbeat answer's word on the money chain's stop (DESIGN.md 11)."""
    pending = state.stop_pending_at is not None
    if word == stopping.PENDING:
        if pending:
            return state, []
        # acknowledged at once: the next heartbeat goes out now and says so
        state = dataclasses.replace(state, stop_pending_at=now, next_beat=now)
        note = "the head will stop this instance (stop pending): acknowledged; Ray's exit is"
        return state, [Log(f"{note} part of the stop from now on")]
    if not pending:
        return state, []
    gone = state.ray_gone_in_stop
    state = dataclasses.replace(state, stop_pending_at=None, ray_gone_in_stop=None)
    said = "stop cancelled" if word == stopping.CANCELLED else "no stop in the head's answer"
    if gone is not None:
        detail = f"{said} after Ray exited for it ({now - gone:.0f}s ago)"
        return _end(state, boot.RAY_EXITED, detail, now)
    return state, [Log(f"{said}: the worker serves on")]


def _ray_exited(state: AgentState, event: events.RayExited, now: float) -> _Out:
    if state.phase != boot.WORKER or not state.ray_started:
        return state, []  # Ray is not ours to watch yet, or its stop is part of the ending
    if state.stop_pending_at is not None:
        if state.ray_gone_in_stop is None:
            state = dataclasses.replace(state, ray_gone_in_stop=now)
        note = f"Ray exited with code {event.code} during the head's stop: part of the stop"
        return state, [Log(f"{note}; waiting for vast's stop")]
    return _end(state, boot.RAY_EXITED, f"Ray exited with code {event.code}", now)


# --- every phase ---------------------------------------------------------------------------------


def _signalled(state: AgentState, event: events.Signalled, now: float) -> _Out:
    name = events.signal_name(event.name)
    if name not in ENDING_SIGNALS:
        return state, []  # QUIT, USR1, USR2, ...: nothing, as the kernel would do for PID 1
    if state.phase in boot.ENDING_PHASES:
        return state, [Log(f"signal {name} while ending: ignored")]
    return _end(state, boot.SIGNAL, f"{name} to PID 1", now)


def _bootstrap_error(state: AgentState, event: events.BootstrapError, now: float) -> _Out:
    if state.phase in boot.ENDING_PHASES:
        return state, [Log(f"error while ending (the ending goes on): {event.detail}")]
    return _end(state, boot.BOOTSTRAP_ERROR, event.detail, now)


# --- ending: report, stop Ray, destroy, never exit -----------------------------------------------


def _end(state: AgentState, reason: str, detail: str, now: float) -> _Out:
    """The one way out of the live phases: report first. A boot that was resuming reports as
    the worker it was."""
    phase = boot.WORKER if state.phase == boot.RESUMING else state.phase
    report = Report(reason, detail[: boot.DETAIL_LIMIT], phase, state.record_id or None)
    state = dataclasses.replace(
        state,
        phase=boot.ENDING,
        in_flight=None,
        ending=report,
        ended_at=now,
        report_deadline=now + state.timings.report_wait,
    )
    return _send_report(state, [Log(f"ending: {reason}: {detail}")], now)


def _send_report(state: AgentState, commands: list[Command], now: float) -> _Out:
    report, deadline = state.ending, state.report_deadline
    assert report is not None and deadline is not None
    timeout = max(0.2, min(deadline - now, REPORT_ATTEMPT_TIMEOUT))
    state = dataclasses.replace(state, in_flight="report", next_report=None)
    return state, [*commands, SendReport(report, timeout)]


def _report_done(state: AgentState, event: events.ReportDone, now: float) -> _Out:
    if state.phase != boot.ENDING or state.in_flight != "report":
        return state, []
    state = dataclasses.replace(state, in_flight=None)
    if event.delivered:
        state = dataclasses.replace(state, report_delivered=event.status == 200)
        return _after_report(state, event, [Log(f"report delivered ({event.status})")], now)
    problem = event.error or events.describe(event.status or 0, event.doc)
    notes: list[Command] = [Log(f"report not delivered: {problem}")]
    deadline = state.report_deadline if state.report_deadline is not None else now
    if now + REPORT_RESEND >= deadline:
        notes.append(Log("no answer to the report in time; destroying anyway"))
        return _begin_destroy(state, notes, now)
    return dataclasses.replace(state, next_report=now + REPORT_RESEND), notes


def _after_report(
    state: AgentState, event: events.ReportDone, commands: list[Command], now: float
) -> _Out:
    """What follows the head's answer to the report: the destroy, unless the head says this TERM
    was its own deliberate stop (DESIGN.md 10). Then, and only for a worker with an identity to
    keep, Ray is stopped cleanly, the identity is kept on the disk and the container stops.
    Every other answer, and no answer, means destroy, as the seed says."""
    identity = state.kept_identity
    if deliberate_stop(state, event) and identity is not None:
        return _keep_disk(state, identity, commands, now)
    return _begin_destroy(state, commands, now)


def deliberate_stop(state: AgentState, event: events.ReportDone) -> bool:
    """The head's 200 to the report of a TERM (INT, HUP) to a worker says `deliberate_stop`."""
    report = state.ending
    return (
        report is not None
        and report.reason == boot.SIGNAL
        and report.phase == boot.WORKER
        and event.status == 200
        and isinstance(event.doc, Mapping)
        and event.doc.get("deliberate_stop") is True
    )


def _keep_disk(
    state: AgentState, identity: Mapping[str, Any], commands: list[Command], now: float
) -> _Out:
    state = dataclasses.replace(
        state, phase=boot.KEEPING, next_report=None, in_flight="save", kept_disk=True
    )
    out = [*commands, Log("the head stopped this instance deliberately: keeping the disk")]
    if state.ray_started:
        out.append(StopRay(state.timings.ray_stop_grace))
    return state, [*out, SaveIdentity(identity)]


def _identity_saved(state: AgentState, event: events.IdentitySaved, now: float) -> _Out:
    if state.phase != boot.KEEPING or state.in_flight != "save":
        return state, []
    if not event.ok:
        # a stop that cannot be resumed from keeps nothing worth its storage: destroy
        state = dataclasses.replace(state, in_flight=None, kept_disk=False)
        note = Log(f"the identity could not be kept ({event.error}); destroying instead")
        return _begin_destroy(state, [note], now, ray_stopped=True)
    state = dataclasses.replace(state, in_flight=None, phase=boot.STOPPED)
    return state, [Log("identity kept on the disk; PID 1 exits, the container stops"), Exit(0)]


def _begin_destroy(
    state: AgentState, commands: list[Command], now: float, *, ray_stopped: bool = False
) -> _Out:
    state = dataclasses.replace(state, phase=boot.DESTROYING, next_report=None)
    out = list(commands)
    if state.ray_started and not ray_stopped:
        out.append(StopRay(state.timings.ray_stop_grace))
    return _destroy(state, out, now)


def _destroy(state: AgentState, commands: list[Command], now: float) -> _Out:
    attempt = state.destroy_attempts + 1
    state = dataclasses.replace(state, in_flight="destroy", destroy_attempts=attempt)
    return state, [*commands, DestroySelf(attempt, state.timings.destroy_timeout)]


def _destroy_answered(state: AgentState, event: events.DestroyAnswered, now: float) -> _Out:
    if state.phase not in (boot.DESTROYING, boot.CONFIRMED) or state.in_flight != "destroy":
        return state, []
    retry = state.timings.self_destroy_retry
    confirmed = event.confirmed or state.phase == boot.CONFIRMED
    state = dataclasses.replace(
        state,
        in_flight=None,
        phase=boot.CONFIRMED if confirmed else boot.DESTROYING,
        confirmed_at=state.confirmed_at
        if state.confirmed_at is not None
        else (now if event.confirmed else None),
        next_destroy=now + (retry * CONFIRMED_BACKOFF if event.confirmed else retry),
    )
    return state, [Log(f"self-destroy attempt {state.destroy_attempts}: {event.what}")]


# Each event's handler: (state, event, now) -> (state, commands).
_HANDLERS: dict[type, Callable[[AgentState, Any, float], _Out]] = {
    events.Tick: lambda state, event, now: _tick(state, now),
    events.Started: _started,
    events.EnrollAnswered: _enroll_answered,
    events.EnrollFailed: lambda state, event, now: _enroll_not_done(state, event.error, now),
    events.ResumeAnswered: _resume_answered,
    events.ResumeFailed: lambda state, event, now: _resume_not_done(state, event.error, now),
    events.HeartbeatAnswered: _heartbeat_answered,
    events.HeartbeatFailed: lambda state, event, now: _heartbeat_not_taken(
        state, f"failed: {event.error}", now
    ),
    events.RayExited: _ray_exited,
    events.Signalled: _signalled,
    events.BootstrapError: _bootstrap_error,
    events.ReportDone: _report_done,
    events.IdentitySaved: _identity_saved,
    events.DestroyAnswered: _destroy_answered,
}
