"""One boot of the container as the machine knows it: its phases, why it ends, and its numbers.

`agent.lifecycle.step` takes an `AgentState` and gives the next one; the drivers keep it, read its
phase (`LIVE_PHASES`: a signal may cut a request short) and build the first with `initial`. The
phases are the diagram's (`agent.lifecycle`); `Timings` holds every number the machine decides
by, and how the head's answers retune them; `Report` is what a boot that ends tells the head.

A deliberate stop (the money chain's: the head recorded intent `stopped` before vast's stop sent
the TERM) keeps the disk: the worker reports first as always, and only when the head's answer
says `deliberate_stop` does it stop Ray cleanly, keep its identity on the container's disk
(`keeping`) and exit without destroying (`stopped`). Every other ending, and a report nobody
answered, destroys, as the seed says. The next boot of a container with a saved identity resumes
instead of enrolling (`resuming`, when `resumable` says the identity has what it takes): it
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

Runs on every Python Ray supports (3.9 and up): no `match`, no `X | Y` outside annotations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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

ENROLL_PAUSE = 5.0  # at most this long between enrollment attempts
DETAIL_LIMIT = 4000  # agent-report.v1.json's maxLength


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

    def retuned(self, limits: Mapping[str, Any]) -> Timings:
        """The enrollment answer's `thresholds`: the head's numbers win over the environment's; a
        missing or nonsense one keeps the old."""
        return dataclasses.replace(
            self,
            heartbeat_interval=_positive(limits.get("heartbeat_interval_seconds"))
            or self.heartbeat_interval,
            worker_gives_up_after=_positive(limits.get("worker_gives_up_after_seconds"))
            or self.worker_gives_up_after,
            report_wait=_positive(limits.get("report_wait_seconds")) or self.report_wait,
            self_destroy_retry=_positive(limits.get("self_destroy_retry_seconds"))
            or self.self_destroy_retry,
            ray_stop_grace=_positive(limits.get("ray_stop_grace_seconds")) or self.ray_stop_grace,
        )

    def retuned_by_heartbeat(self, limits: Mapping[str, Any]) -> Timings:
        """A heartbeat answer's numbers: it may change the interval and the give-up time only."""
        return dataclasses.replace(
            self,
            heartbeat_interval=_positive(limits.get("heartbeat_interval_seconds"))
            or self.heartbeat_interval,
            worker_gives_up_after=_positive(limits.get("worker_gives_up_after_seconds"))
            or self.worker_gives_up_after,
        )


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
    def kept_identity(self) -> Mapping[str, Any] | None:
        """What a deliberate stop keeps: this boot's enrollment answer (or the identity it was
        still resuming with), when it has the certificate and key a resume needs."""
        found = self.answer if self.answer is not None else self.saved
        if found is None:
            return None
        identity = {**found, "record_id": found.get("record_id") or self.record_id}
        return identity if resumable(identity) else None

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


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
