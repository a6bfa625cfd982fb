"""What the driver must do: the commands `agent.lifecycle.step` returns, one frozen dataclass each.

The other half of the machine's contract with its drivers (`agent.events` is the first): the
machine decides, a command says what to carry out, and the driver does the I/O. `ray_counts` is
the small print of what `StartRay` carries (the node type's counts over the machine's).

The driver's side: execute each command in order; answer every `SendEnroll`, `SendResume`,
`SendHeartbeat`, `SendReport`, `SaveIdentity` and `DestroySelf` with exactly one event; carry out
`Exit` by ending PID 1 (nothing more is fed after it); feed `Tick` once the time of the last
`WakeAt` has come.

Runs on every Python Ray supports (3.9 and up): no `match`, no `X | Y` outside annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.state import Report


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


# --- the protocol's small print: what `StartRay` carries ---------------------------------------


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


def _count(value: Any) -> int | None:
    """A whole number of at least 0 (what `ray start --num-cpus` takes), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
