"""The agent's decisions as one pure state machine: `step(state, event, now) -> (state, commands)`.

Why a machine: the same decisions must run in two worlds. The real agent (`agent.watchdog`) feeds
it events from real sockets, a real Ray process and real signals on the monotonic clock; the
virtual-time harness (`bench.agents`) feeds it events from the head's application object and
vastsim on the simulator's clock. Nothing here does I/O or reads a clock, so a test (and the
harness) can hold the agent to the seed's rules without playing it by hand.

    Started ----------> candidate --EnrollAnswered(200)--> worker -------+
       |                  |  ^  retry every min(5 s, window/10)           | heartbeat every interval
       |                  +--+  EnrollFailed / 503 / ...                  |
       +-(saved identity)-> resuming --ResumeAnswered(200)--> worker      |
                          |  ^  retried as an enrollment is               |
                          +--+                                            |
    every ending of the seed's table (below) <----------------------------+
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

A deliberate stop (the money chain's: the head recorded intent `stopped` before vast's stop sent
the TERM) keeps the disk: the worker reports first as always, and only when the head's answer
says `deliberate_stop` does it stop Ray cleanly, keep its identity on the container's disk and
exit without destroying. Every other ending, and a report nobody answered, destroys, as the seed
says. The next boot of a container with a saved identity resumes instead of enrolling: it
presents its saved certificate (mutual TLS) and the head lets it in only when it started the
instance again itself; the identity is forgotten as soon as the resume is taken, so an
unexpected restart later enrolls and is refused as a second enrollment.

The endings (reason strings are the protocol's, agent-report.v1.json):

    no heartbeat success for worker_gives_up_after seconds    no_heartbeat_success
    a 403 answer to a heartbeat                               heartbeat_refused
    a 403 answer to /enroll                                   enroll_refused
    the head refuses a second enrollment (a restart)          second_enrollment
    no enrollment within candidate_self_destroy seconds       no_enrollment
    Ray on the worker exits                                   ray_exited
    TERM, INT or HUP to PID 1                                 signal
    an error in the bootstrap                                 bootstrap_error
    the head refuses the resume of a saved identity           resume_refused

QUIT, USR1 and USR2 change nothing (the kernel drops them for a PID 1 without handlers); a signal
or an error while already ending changes nothing either: the ending is under way.

The driver's contract: execute each command in order; answer every `SendEnroll`, `SendResume`,
`SendHeartbeat`, `SendReport`, `SaveIdentity` and `DestroySelf` with exactly one event (answered
or failed); carry out `Exit` by ending PID 1 (nothing more is fed after it);
feed `Tick` once the time of the last `WakeAt` has come; feed `RayExited` when Ray's process ends,
`Signalled` when a signal arrives, `BootstrapError` when the driver itself fails. `now` is any
monotonic clock in seconds, the same one `AgentState.started` was taken on.

Runs on every Python Ray supports (3.9 and up): no `match`, no `X | Y` outside annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent import stopping
from agent.config import Settings

# Phases of one boot of the container.
CANDIDATE = "candidate"  # not enrolled yet: enrolling, retrying
RESUMING = "resuming"  # a saved identity: asking the head to resume it, retrying
WORKER = "worker"  # enrolled: Ray started, heartbeats
ENDING = "ending"  # decided to end: the report is out, its answer awaited up to report_wait
DESTROYING = "destroying"  # Ray stopped; destroying through the vast API until vast confirms
CONFIRMED = "confirmed"  # vast confirmed; asked again now and then, never exits
KEEPING = "keeping"  # a deliberate stop: Ray stopped, the identity being saved to the disk
STOPPED = "stopped"  # the identity is on the disk: PID 1 exits, the container stops
LIVE_PHASES = (CANDIDATE, RESUMING, WORKER)
ENDING_PHASES = (ENDING, DESTROYING, CONFIRMED, KEEPING, STOPPED)

# The reasons of the seed's table (the head and its tests read these strings).
NO_HEARTBEAT_SUCCESS = "no_heartbeat_success"
HEARTBEAT_REFUSED = "heartbeat_refused"
ENROLL_REFUSED = "enroll_refused"
SECOND_ENROLLMENT = "second_enrollment"
NO_ENROLLMENT = "no_enrollment"
RAY_EXITED = "ray_exited"
SIGNAL = "signal"
BOOTSTRAP_ERROR = "bootstrap_error"
RESUME_REFUSED = "resume_refused"

ENDING_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGHUP"})
REPORT_RESEND = 0.2  # seconds between report attempts while the head does not answer
REPORT_ATTEMPT_TIMEOUT = 5.0  # one report attempt waits at most this long
ENROLL_PAUSE = 5.0  # at most this long between enrollment attempts
# After vast confirmed, ask again this many retry intervals later (a destroy that did not take).
CONFIRMED_BACKOFF = 12
DETAIL_LIMIT = 4000  # agent-report.v1.json's maxLength


# --- settings and state --------------------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """Every number the machine decides by (seconds). The container's environment gives the first
    values; the enrollment answer and each heartbeat answer may change them."""

    heartbeat_interval: float = 30.0
    worker_gives_up_after: float = 300.0
    candidate_self_destroy: float = 600.0
    report_wait: float = 10.0
    self_destroy_retry: float = 5.0
    request_timeout: float = 10.0
    ray_stop_grace: float = 3.0

    @classmethod
    def of(cls, settings: Settings) -> Timings:
        return cls(
            heartbeat_interval=settings.heartbeat_interval,
            worker_gives_up_after=settings.worker_gives_up_after,
            candidate_self_destroy=settings.candidate_self_destroy,
            report_wait=settings.report_wait,
            self_destroy_retry=settings.self_destroy_retry,
        )

    @property
    def enroll_pause(self) -> float:
        """Between enrollment attempts: a tenth of the window, between 0.2 s and 5 s."""
        return min(ENROLL_PAUSE, max(0.2, self.candidate_self_destroy / 10))

    @property
    def destroy_timeout(self) -> float:
        return max(1.0, min(self.self_destroy_retry * 2, 10.0))


@dataclass(frozen=True)
class Report:
    """Why this boot ends: what `SendReport` tells the head (the driver adds the identity)."""

    reason: str
    detail: str
    phase: str  # how far the container got: candidate or worker
    record_id: str | None


@dataclass(frozen=True)
class AgentState:
    """One boot of the container, as the machine knows it. Times are on the driver's clock."""

    timings: Timings
    started: float  # this boot's PID 1 started: the enrollment window runs from here
    phase: str = CANDIDATE
    record_id: str = ""  # the launcher's, then the enrollment answer's
    cpus: int = 0
    gpus: int = 0
    booted: bool = False  # `Started` has been seen
    in_flight: str | None = None  # the request whose answer is awaited: enroll, heartbeat, ...
    next_enroll: float | None = None
    last_problem: str = "no attempt yet"  # why the last enrollment attempt did not enroll
    answer: Mapping[str, Any] | None = None  # the enrollment answer (certificate, Ray, URLs)
    ray_started: bool = False
    last_ok: float | None = None  # last heartbeat success (the start of serving before one)
    next_beat: float | None = None
    seq: int = 0
    ending: Report | None = None
    ended_at: float | None = None
    report_deadline: float | None = None
    next_report: float | None = None
    report_delivered: bool | None = None  # None: no answer (yet); True/False: the head's answer
    next_destroy: float | None = None
    destroy_attempts: int = 0
    confirmed_at: float | None = None
    # The identity a deliberate stop kept on the container's disk (the enrollment answer, with
    # its certificate and key), found by the driver at boot: this boot resumes instead of
    # enrolling. None: a boot that enrolls.
    saved: Mapping[str, Any] | None = None
    kept_disk: bool = False  # the head said "deliberate stop": the disk is kept, no destroy
    # The money chain's stop handshake (DESIGN.md 11): when a heartbeat answer said "stop
    # pending" (each heartbeat acknowledges it from then on), and when Ray exited during it
    # (drained for the stop: part of it, not an ending, until `worker_gives_up_after`).
    stop_pending_at: float | None = None
    ray_gone_in_stop: float | None = None

    @property
    def enroll_deadline(self) -> float:
        return self.started + self.timings.candidate_self_destroy

    @property
    def gives_up_at(self) -> float | None:
        if self.last_ok is None:
            return None
        return self.last_ok + self.timings.worker_gives_up_after

    @property
    def stop_overdue_at(self) -> float | None:
        """Ray exited for a stop whose TERM has not come this long after: an ending."""
        if self.ray_gone_in_stop is None:
            return None
        return self.ray_gone_in_stop + self.timings.worker_gives_up_after


def initial(
    timings: Timings,
    *,
    started: float,
    record_id: str = "",
    saved: Mapping[str, Any] | None = None,
) -> AgentState:
    """A boot that has not started yet; feed it `Started`. `saved`: the identity a deliberate
    stop kept on the disk (`SaveIdentity`'s), when the driver found one: the boot resumes."""
    if saved is not None and not resumable(saved):
        saved = None
    if saved is not None:
        record_id = str(saved.get("record_id") or record_id)
    return AgentState(timings=timings, started=started, record_id=record_id, saved=saved)


def resumable(saved: Mapping[str, Any]) -> bool:
    """Whether a saved identity has what a resume needs: the certificate and key, the CA, the
    heartbeat URL (where the resume goes) and the record."""
    cert = saved.get("certificate")
    beat = saved.get("heartbeat")
    return (
        isinstance(cert, Mapping)
        and all(isinstance(cert.get(k), str) and cert.get(k) for k in ("cert_pem", "key_pem"))
        and isinstance(cert.get("ca_pem"), str)
        and isinstance(beat, Mapping)
        and isinstance(beat.get("url"), str)
        and bool(saved.get("record_id"))
    )


# --- events --------------------------------------------------------------------------------------


class Event:
    """Something the driver saw."""


@dataclass(frozen=True)
class Started(Event):
    """PID 1 is up and counted its machine: the real core count and the GPUs."""

    cpus: int
    gpus: int


@dataclass(frozen=True)
class Tick(Event):
    """The time of the last `WakeAt` has come (or any time: a tick too early changes nothing)."""


@dataclass(frozen=True)
class EnrollAnswered(Event):
    status: int
    doc: Any


@dataclass(frozen=True)
class EnrollFailed(Event):
    """No answer at all (refused, timed out, TLS failed)."""

    error: str


@dataclass(frozen=True)
class HeartbeatAnswered(Event):
    status: int
    doc: Any


@dataclass(frozen=True)
class HeartbeatFailed(Event):
    error: str


@dataclass(frozen=True)
class RayExited(Event):
    code: int


@dataclass(frozen=True)
class Signalled(Event):
    """A signal reached PID 1, by name: `SIGTERM` (or `TERM`)."""

    name: str


@dataclass(frozen=True)
class ReportDone(Event):
    """One report attempt is over: `status` is the head's answer, None when nothing answered."""

    status: int | None
    doc: Any = None
    error: str = ""

    @property
    def delivered(self) -> bool:
        """The head took it or refused it for good (a 5xx or no answer is worth trying again)."""
        return self.status is not None and self.status < 500


@dataclass(frozen=True)
class ResumeAnswered(Event):
    """The head's answer to a resume (the enrollment answer without a certificate, on 200)."""

    status: int
    doc: Any


@dataclass(frozen=True)
class ResumeFailed(Event):
    """No answer at all to a resume (refused, timed out, TLS failed)."""

    error: str


@dataclass(frozen=True)
class IdentitySaved(Event):
    """`SaveIdentity` is done: whether the identity is on the disk."""

    ok: bool
    error: str = ""


@dataclass(frozen=True)
class DestroyAnswered(Event):
    """One self-destroy call is over: whether vast confirmed the instance is gone."""

    confirmed: bool
    what: str = ""


@dataclass(frozen=True)
class BootstrapError(Event):
    """The driver failed (Ray could not be started, an unexpected exception)."""

    detail: str


# --- commands ------------------------------------------------------------------------------------


class Command:
    """Something the driver must do."""


@dataclass(frozen=True)
class Log(Command):
    message: str


@dataclass(frozen=True)
class SendEnroll(Command):
    timeout: float


@dataclass(frozen=True)
class StartRay(Command):
    cpus: int  # `--num-cpus`: the declared count, else the machine's (`ray_counts`)
    gpus: int  # `--num-gpus`: likewise
    answer: Mapping[str, Any]  # the enrollment answer: Ray's section says how


@dataclass(frozen=True)
class SendHeartbeat(Command):
    seq: int
    timeout: float
    stop_acknowledged: bool = False  # the body says "stop": "acknowledged" (DESIGN.md 11)


@dataclass(frozen=True)
class SendReport(Command):
    report: Report
    timeout: float


@dataclass(frozen=True)
class StopRay(Command):
    grace: float  # TERM the process group, KILL it after this long


@dataclass(frozen=True)
class SendResume(Command):
    """POST /resume on the heartbeat port with the saved certificate (mutual TLS)."""

    timeout: float


@dataclass(frozen=True)
class SaveIdentity(Command):
    """Keep this on the container's disk (private to the container: 0600): the enrollment answer
    with the certificate and key, for the next boot's resume."""

    identity: Mapping[str, Any]


@dataclass(frozen=True)
class ForgetIdentity(Command):
    """Remove the saved identity from the disk: it served its one resume."""


@dataclass(frozen=True)
class Exit(Command):
    """End PID 1 without destroying: the container stops (vast is stopping it), its disk kept."""

    code: int = 0


@dataclass(frozen=True)
class DestroySelf(Command):
    attempt: int
    timeout: float


@dataclass(frozen=True)
class WakeAt(Command):
    """Feed `Tick` at this time (each step gives the one that counts; the last one wins)."""

    at: float


# --- the machine ---------------------------------------------------------------------------------

_Out = tuple[AgentState, list[Command]]


def step(state: AgentState, event: Event, now: float) -> tuple[AgentState, list[Command]]:
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
    if state.phase in (CANDIDATE, RESUMING) and state.booted:
        times.append(state.enroll_deadline)
        if state.in_flight is None:
            times.append(state.next_enroll)
    elif state.phase == WORKER:
        times.append(state.gives_up_at)
        times.append(state.stop_overdue_at)
        if state.in_flight is None:
            times.append(state.next_beat)
    elif state.phase == ENDING:
        times.append(state.report_deadline)
        if state.in_flight is None:
            times.append(state.next_report)
    elif state.phase in (DESTROYING, CONFIRMED) and state.in_flight is None:
        times.append(state.next_destroy)
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _handle(state: AgentState, event: Event, now: float) -> _Out:
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"not an agent event: {event!r}")
    return handler(state, event, now)


def _tick(state: AgentState, now: float) -> _Out:
    if state.phase in (CANDIDATE, RESUMING) and state.booted:
        if now >= state.enroll_deadline:
            window = f"{state.timings.candidate_self_destroy:g}s"
            done = "resumed" if state.phase == RESUMING else "enrolled"
            detail = f"not {done} within {window} (last: {state.last_problem})"
            return _end(state, NO_ENROLLMENT, detail, now)
        if state.in_flight is None and state.next_enroll is not None and now >= state.next_enroll:
            return _try_enroll(state, now)
    elif state.phase == WORKER:
        # a beat that is due goes out first: it may be the success that keeps the worker
        if state.in_flight is None and state.next_beat is not None and now >= state.next_beat:
            return _send_heartbeat(state, now)
        overdue = state.stop_overdue_at
        if overdue is not None and now >= overdue:
            detail = f"Ray exited for the head's stop {now - (state.ray_gone_in_stop or now):.0f}s"
            return _end(state, RAY_EXITED, f"{detail} ago and no stop came", now)
        return _maybe_give_up(state, [], now)
    elif state.phase == ENDING:
        if state.report_deadline is not None and now >= state.report_deadline:
            note = Log("no answer to the report in time; destroying anyway")
            return _begin_destroy(state, [note], now)
        if state.in_flight is None and state.next_report is not None and now >= state.next_report:
            return _send_report(state, [], now)
    elif (
        state.phase in (DESTROYING, CONFIRMED)
        and state.in_flight is None
        and state.next_destroy is not None
        and now >= state.next_destroy
    ):
        return _destroy(state, [], now)
    return state, []


# --- candidate -----------------------------------------------------------------------------------


def _started(state: AgentState, event: Started, now: float) -> _Out:
    if state.booted or state.phase != CANDIDATE:
        return state, []
    phase = RESUMING if state.saved is not None else CANDIDATE
    state = dataclasses.replace(state, booted=True, cpus=event.cpus, gpus=event.gpus, phase=phase)
    notes: list[Command] = []
    if phase == RESUMING:
        notes.append(Log(f"a saved identity of {state.record_id}: resuming instead of enrolling"))
    state, commands = _try_enroll(state, now)
    return state, notes + commands


def _try_enroll(state: AgentState, now: float) -> _Out:
    """One attempt to get in: an enrollment, or the resume of a saved identity."""
    left = state.enroll_deadline - now
    if left <= 0:
        return _tick(state, now)
    timeout = min(state.timings.request_timeout, left)
    if state.phase == RESUMING:
        state = dataclasses.replace(state, in_flight="resume", next_enroll=None)
        return state, [SendResume(timeout)]
    state = dataclasses.replace(state, in_flight="enroll", next_enroll=None)
    return state, [SendEnroll(timeout)]


def _enroll_answered(state: AgentState, event: EnrollAnswered, now: float) -> _Out:
    if state.phase != CANDIDATE or state.in_flight != "enroll":
        return state, []
    if event.status == 200 and isinstance(event.doc, Mapping):
        return _enrolled(state, event.doc, now)
    if event.status == 403:
        restart = error_code(event.doc) == "second_enrollment"
        reason = SECOND_ENROLLMENT if restart else ENROLL_REFUSED
        detail = f"the head refused the enrollment: {describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), reason, detail, now)
    return _enroll_not_done(state, describe(event.status, event.doc), now)


def _enroll_not_done(state: AgentState, problem: str, now: float) -> _Out:
    """Not enrolled this time (no answer, not ready, a 5xx...): try again after a pause, until
    the enrollment window closes."""
    if state.phase != CANDIDATE or state.in_flight != "enroll":
        return state, []
    retry = min(now + state.timings.enroll_pause, state.enroll_deadline)
    state = dataclasses.replace(state, in_flight=None, last_problem=problem, next_enroll=retry)
    return state, [Log(f"enrollment not done: {problem}")]


# --- resuming: a saved identity ----------------------------------------------------------------


def _resume_answered(state: AgentState, event: ResumeAnswered, now: float) -> _Out:
    if state.phase != RESUMING or state.in_flight != "resume":
        return state, []
    saved = state.saved or {}
    if event.status == 200 and isinstance(event.doc, Mapping):
        # the head sends no certificate: the worker goes on with the one it saved
        answer = {**event.doc, "certificate": saved.get("certificate")}
        state, commands = _enrolled(dataclasses.replace(state, saved=None), answer, now)
        forget: list[Command] = [ForgetIdentity()]
        return state, forget + commands
    if event.status == 403:
        detail = f"the head refused the resume: {describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), RESUME_REFUSED, detail, now)
    return _resume_not_done(state, describe(event.status, event.doc), now)


def _resume_not_done(state: AgentState, problem: str, now: float) -> _Out:
    """Not resumed this time: tried again as an enrollment is, until the window closes."""
    if state.phase != RESUMING or state.in_flight != "resume":
        return state, []
    retry = min(now + state.timings.enroll_pause, state.enroll_deadline)
    state = dataclasses.replace(state, in_flight=None, last_problem=problem, next_enroll=retry)
    return state, [Log(f"resume not done: {problem}")]


def _enrolled(state: AgentState, answer: Mapping[str, Any], now: float) -> _Out:
    """A worker now: Ray starts with the real core count and GPUs, or the ones the node type
    declares (`ray_counts`); the first heartbeat goes out at once (on the next tick, so a Ray
    that cannot start ends the boot before any heartbeat)."""
    resumed = state.phase == RESUMING
    limits = answer.get("thresholds")
    timings = _retuned(state.timings, limits if isinstance(limits, Mapping) else {})
    record_id = str(answer.get("record_id") or state.record_id)
    state = dataclasses.replace(
        state,
        phase=WORKER,
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


def ray_counts(cpus: int, gpus: int, answer: Mapping[str, Any]) -> tuple[int, int, str]:
    """The CPUs and GPUs Ray advertises: what the node type declares (`ray.num_cpus` and
    `ray.num_gpus` of the enrollment answer, from the spec's `resources:`), else what the agent
    counted on the machine; and a line for the log when a declaration changed a count."""
    ray = answer.get("ray")
    declared = ray if isinstance(ray, Mapping) else {}
    wanted_cpus = _count(declared.get("num_cpus"))
    wanted_gpus = _count(declared.get("num_gpus"))
    changed = []
    if wanted_cpus is not None and wanted_cpus != cpus:
        changed.append(f"{wanted_cpus} CPUs (the machine has {cpus})")
    if wanted_gpus is not None and wanted_gpus != gpus:
        changed.append(f"{wanted_gpus} GPUs (the machine has {gpus})")
    said = "Ray advertises " + " and ".join(changed) + ", as the node type declares"
    return (
        cpus if wanted_cpus is None else wanted_cpus,
        gpus if wanted_gpus is None else wanted_gpus,
        said if changed else "",
    )


def _retuned(timings: Timings, limits: Mapping[str, Any]) -> Timings:
    """The head's numbers win over the environment's; a missing or nonsense one keeps the old."""
    return dataclasses.replace(
        timings,
        heartbeat_interval=_positive(limits.get("heartbeat_interval_seconds"))
        or timings.heartbeat_interval,
        worker_gives_up_after=_positive(limits.get("worker_gives_up_after_seconds"))
        or timings.worker_gives_up_after,
        report_wait=_positive(limits.get("report_wait_seconds")) or timings.report_wait,
        self_destroy_retry=_positive(limits.get("self_destroy_retry_seconds"))
        or timings.self_destroy_retry,
        ray_stop_grace=_positive(limits.get("ray_stop_grace_seconds")) or timings.ray_stop_grace,
    )


# --- worker --------------------------------------------------------------------------------------


def _send_heartbeat(state: AgentState, now: float) -> _Out:
    seq = state.seq + 1
    t = state.timings
    state = dataclasses.replace(
        state, seq=seq, in_flight="heartbeat", next_beat=now + t.heartbeat_interval
    )
    timeout = min(t.request_timeout, t.heartbeat_interval)
    return state, [SendHeartbeat(seq, timeout, state.stop_pending_at is not None)]


def _heartbeat_answered(state: AgentState, event: HeartbeatAnswered, now: float) -> _Out:
    if state.phase != WORKER or state.in_flight != "heartbeat":
        return state, []
    if event.status == 200:
        limits = event.doc if isinstance(event.doc, Mapping) else {}
        t = state.timings
        timings = dataclasses.replace(
            t,
            heartbeat_interval=_positive(limits.get("heartbeat_interval_seconds"))
            or t.heartbeat_interval,
            worker_gives_up_after=_positive(limits.get("worker_gives_up_after_seconds"))
            or t.worker_gives_up_after,
        )
        state = dataclasses.replace(state, in_flight=None, last_ok=now, timings=timings)
        return _stop_word(state, stopping.word(event.doc), now)
    if event.status == 403:
        detail = f"the head refused a heartbeat: {describe(event.status, event.doc)}"
        return _end(dataclasses.replace(state, in_flight=None), HEARTBEAT_REFUSED, detail, now)
    return _heartbeat_not_taken(state, f"not taken: {describe(event.status, event.doc)}", now)


def _heartbeat_not_taken(state: AgentState, problem: str, now: float) -> _Out:
    if state.phase != WORKER or state.in_flight != "heartbeat":
        return state, []
    state = dataclasses.replace(state, in_flight=None)
    return _maybe_give_up(state, [Log(f"heartbeat {state.seq} {problem}")], now)


def _maybe_give_up(state: AgentState, commands: list[Command], now: float) -> _Out:
    gives_up_at = state.gives_up_at
    if state.last_ok is None or gives_up_at is None or now < gives_up_at:
        return state, commands
    limit = f"limit {state.timings.worker_gives_up_after:g}s"
    detail = f"no heartbeat success for {now - state.last_ok:.0f}s ({limit})"
    state, more = _end(state, NO_HEARTBEAT_SUCCESS, detail, now)
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
        return _end(state, RAY_EXITED, detail, now)
    return state, [Log(f"{said}: the worker serves on")]


def _ray_exited(state: AgentState, event: RayExited, now: float) -> _Out:
    if state.phase != WORKER or not state.ray_started:
        return state, []  # Ray is not ours to watch yet, or its stop is part of the ending
    if state.stop_pending_at is not None:
        if state.ray_gone_in_stop is None:
            state = dataclasses.replace(state, ray_gone_in_stop=now)
        note = f"Ray exited with code {event.code} during the head's stop: part of the stop"
        return state, [Log(f"{note}; waiting for vast's stop")]
    return _end(state, RAY_EXITED, f"Ray exited with code {event.code}", now)


# --- every phase ---------------------------------------------------------------------------------


def signal_name(name: str) -> str:
    """`TERM` and `SIGTERM` are the same signal: `SIGTERM`."""
    upper = name.upper()
    return upper if upper.startswith("SIG") else f"SIG{upper}"


def _signalled(state: AgentState, event: Signalled, now: float) -> _Out:
    name = signal_name(event.name)
    if name not in ENDING_SIGNALS:
        return state, []  # QUIT, USR1, USR2, ...: nothing, as the kernel would do for PID 1
    if state.phase in ENDING_PHASES:
        return state, [Log(f"signal {name} while ending: ignored")]
    return _end(state, SIGNAL, f"{name} to PID 1", now)


def _bootstrap_error(state: AgentState, event: BootstrapError, now: float) -> _Out:
    if state.phase in ENDING_PHASES:
        return state, [Log(f"error while ending (the ending goes on): {event.detail}")]
    return _end(state, BOOTSTRAP_ERROR, event.detail, now)


# --- ending: report, stop Ray, destroy, never exit -----------------------------------------------


def _end(state: AgentState, reason: str, detail: str, now: float) -> _Out:
    """The one way out of the live phases: report first. A boot that was resuming reports as
    the worker it was."""
    phase = WORKER if state.phase == RESUMING else state.phase
    report = Report(reason, detail[:DETAIL_LIMIT], phase, state.record_id or None)
    state = dataclasses.replace(
        state,
        phase=ENDING,
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


def _report_done(state: AgentState, event: ReportDone, now: float) -> _Out:
    if state.phase != ENDING or state.in_flight != "report":
        return state, []
    state = dataclasses.replace(state, in_flight=None)
    if event.delivered:
        state = dataclasses.replace(state, report_delivered=event.status == 200)
        return _after_report(state, event, [Log(f"report delivered ({event.status})")], now)
    problem = event.error or describe(event.status or 0, event.doc)
    notes: list[Command] = [Log(f"report not delivered: {problem}")]
    deadline = state.report_deadline if state.report_deadline is not None else now
    if now + REPORT_RESEND >= deadline:
        notes.append(Log("no answer to the report in time; destroying anyway"))
        return _begin_destroy(state, notes, now)
    return dataclasses.replace(state, next_report=now + REPORT_RESEND), notes


def _after_report(
    state: AgentState, event: ReportDone, commands: list[Command], now: float
) -> _Out:
    """What follows the head's answer to the report: the destroy, unless the head says this TERM
    was its own deliberate stop (DESIGN.md 10). Then, and only for a worker with an identity to
    keep, Ray is stopped cleanly, the identity is kept on the disk and the container stops.
    Every other answer, and no answer, means destroy, as the seed says."""
    identity = _identity(state)
    if deliberate_stop(state, event) and identity is not None:
        return _keep_disk(state, identity, commands, now)
    return _begin_destroy(state, commands, now)


def deliberate_stop(state: AgentState, event: ReportDone) -> bool:
    """The head's 200 to the report of a TERM (INT, HUP) to a worker says `deliberate_stop`."""
    report = state.ending
    return (
        report is not None
        and report.reason == SIGNAL
        and report.phase == WORKER
        and event.status == 200
        and isinstance(event.doc, Mapping)
        and event.doc.get("deliberate_stop") is True
    )


def _identity(state: AgentState) -> Mapping[str, Any] | None:
    """What a deliberate stop keeps: this boot's enrollment answer (or the identity it was still
    resuming with), when it has the certificate and key a resume needs."""
    found = state.answer if state.answer is not None else state.saved
    if found is None:
        return None
    identity = {**found, "record_id": found.get("record_id") or state.record_id}
    return identity if resumable(identity) else None


def _keep_disk(
    state: AgentState, identity: Mapping[str, Any], commands: list[Command], now: float
) -> _Out:
    state = dataclasses.replace(
        state, phase=KEEPING, next_report=None, in_flight="save", kept_disk=True
    )
    out = [*commands, Log("the head stopped this instance deliberately: keeping the disk")]
    if state.ray_started:
        out.append(StopRay(state.timings.ray_stop_grace))
    return state, [*out, SaveIdentity(identity)]


def _identity_saved(state: AgentState, event: IdentitySaved, now: float) -> _Out:
    if state.phase != KEEPING or state.in_flight != "save":
        return state, []
    if not event.ok:
        # a stop that cannot be resumed from keeps nothing worth its storage: destroy
        state = dataclasses.replace(state, in_flight=None, kept_disk=False)
        note = Log(f"the identity could not be kept ({event.error}); destroying instead")
        return _begin_destroy(state, [note], now, ray_stopped=True)
    state = dataclasses.replace(state, in_flight=None, phase=STOPPED)
    return state, [Log("identity kept on the disk; PID 1 exits, the container stops"), Exit(0)]


def _begin_destroy(
    state: AgentState, commands: list[Command], now: float, *, ray_stopped: bool = False
) -> _Out:
    state = dataclasses.replace(state, phase=DESTROYING, next_report=None)
    out = list(commands)
    if state.ray_started and not ray_stopped:
        out.append(StopRay(state.timings.ray_stop_grace))
    return _destroy(state, out, now)


def _destroy(state: AgentState, commands: list[Command], now: float) -> _Out:
    attempt = state.destroy_attempts + 1
    state = dataclasses.replace(state, in_flight="destroy", destroy_attempts=attempt)
    return state, [*commands, DestroySelf(attempt, state.timings.destroy_timeout)]


def _destroy_answered(state: AgentState, event: DestroyAnswered, now: float) -> _Out:
    if state.phase not in (DESTROYING, CONFIRMED) or state.in_flight != "destroy":
        return state, []
    retry = state.timings.self_destroy_retry
    confirmed = event.confirmed or state.phase == CONFIRMED
    state = dataclasses.replace(
        state,
        in_flight=None,
        phase=CONFIRMED if confirmed else DESTROYING,
        confirmed_at=state.confirmed_at
        if state.confirmed_at is not None
        else (now if event.confirmed else None),
        next_destroy=now + (retry * CONFIRMED_BACKOFF if event.confirmed else retry),
    )
    return state, [Log(f"self-destroy attempt {state.destroy_attempts}: {event.what}")]


# Each event's handler: (state, event, now) -> (state, commands).
_HANDLERS: dict[type, Callable[[AgentState, Any, float], _Out]] = {
    Tick: lambda state, event, now: _tick(state, now),
    Started: _started,
    EnrollAnswered: _enroll_answered,
    EnrollFailed: lambda state, event, now: _enroll_not_done(state, event.error, now),
    ResumeAnswered: _resume_answered,
    ResumeFailed: lambda state, event, now: _resume_not_done(state, event.error, now),
    HeartbeatAnswered: _heartbeat_answered,
    HeartbeatFailed: lambda state, event, now: _heartbeat_not_taken(
        state, f"failed: {event.error}", now
    ),
    RayExited: _ray_exited,
    Signalled: _signalled,
    BootstrapError: _bootstrap_error,
    ReportDone: _report_done,
    IdentitySaved: _identity_saved,
    DestroyAnswered: _destroy_answered,
}


# --- the protocol's small print ------------------------------------------------------------------


def error_code(doc: Any) -> str:
    """The head's error code of a refusal (agent-error.v1.json), or ''."""
    if isinstance(doc, Mapping):
        return str(doc.get("error", ""))
    return ""


def describe(status: int, doc: Any) -> str:
    """An answer in one line, for logs and report details."""
    if isinstance(doc, Mapping) and "message" in doc:
        return f"{status} {doc.get('error', '')}: {doc['message']}"
    return f"{status} {str(doc)[:200]}"


def _count(value: Any) -> int | None:
    """A whole number of at least 0 (what `ray start --num-cpus` takes), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
