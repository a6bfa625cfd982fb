"""What the driver saw: the events `agent.lifecycle.step` takes, one frozen dataclass each.

They are one half of the contract between the machine and its two drivers (`agent.watchdog` on
real sockets and signals, `fleetsim.agents` on vastsim's clock); `agent.commands` is the other.
As in h11's `_events.py`, an event only says what happened and decides nothing, so the drivers
and the tests build them without knowing the machine's transitions. The small print of reading
one is here too: a signal's name, a refusal's error code, an answer in one line for the logs
(`agent.transport` reads its replies with the same two).

The driver's side: answer every `SendEnroll`, `SendResume`, `SendHeartbeat`, `SendReport`,
`SaveIdentity` and `DestroySelf` with exactly one event (answered or failed); feed `Tick` once
the time of the last `WakeAt` has come; feed `RayExited` when Ray's process ends, `Signalled`
when a signal arrives, `BootstrapError` when the driver itself fails. `now`, fed with each, is any
monotonic clock in seconds, the same one `AgentState.started` was taken on.

Runs on every Python Ray supports (3.9 and up): no `match`, no `X | Y` outside annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


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


# --- the protocol's small print: what an event says --------------------------------------------


def signal_name(name: str) -> str:
    """`TERM` and `SIGTERM` are the same signal: `SIGTERM`."""
    upper = name.upper()
    return upper if upper.startswith("SIG") else f"SIG{upper}"


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
