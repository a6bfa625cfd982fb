"""The runner protocol: what the life cycle asks of a container, and what it hands over.

The life cycle decides *when* a container starts, stops or is destroyed; a runner decides *what*
that means. The protocol is small so tests and benchmarks can plug in their own containers:

- `start(spec, now)`: a new boot of the container (`spec.boot` counts from 1).
- `stop(instance_id, now)`: docker stop (stop, reboot, exited, offline, recycle).
- `destroy(instance_id, now)`: the container is removed for good.
- `signal(instance_id, sig, now)`: a signal sent to PID 1 from inside the container; the simulator
  only forwards TERM, INT and HUP (the kernel drops the others to a PID 1 that does not catch them).
- `step(now)`: let containers run; returns the ids whose PID 1 exited by itself since the last step
  (the life cycle then starts the container again, as vast does).
- `next_wakeup()`: the earliest time a container wants to be stepped (virtual time jumps there).
- `allocate_ports(instance_id, wanted)`: host ports for the container ports `"8080/tcp"`, ...
- `loopback_ips`: when true, every instance gets its own loopback address (`127.a.b.c`, see
  `vastsim.lifecycle.loopback_ip`) as its public IP, and its container is told to use it as the
  source of its connections (`VASTSIM_SOURCE_IP`); when false, instances report their machine's
  public IP from the market. The process runner always uses loopback addresses; the scripted
  runner and `NoContainers` do when asked (`ScriptedRunner(loopback_ips=True)`), so in-process
  tests can name a per-instance address too.

Callbacks run without the simulator's lock, in the thread that made the change (an API request,
`Sim.step` or `Sim.advance`); `start`/`stop`/`destroy`/`signal` must not make blocking calls back
into the simulator's HTTP server. Behaviours that call the API do so from `step`.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

FORWARDED_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals that reach PID 1 when sent from inside the container (the live test's finding)."""


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a runner needs to start one boot of an instance's container."""

    instance_id: int
    boot: int
    image: str
    runtype: str
    args: tuple[str, ...] | None
    onstart: str | None
    env: Mapping[str, str]
    ports: Mapping[str, int]
    public_ip: str
    label: str | None
    # False for an image whose `ray` cannot start (the market's `images_without_ray`)
    has_ray: bool = True


class Runner(Protocol):
    """See the module docstring."""

    loopback_ips: bool

    def allocate_ports(self, instance_id: int, wanted: list[str]) -> dict[str, int]: ...

    def start(self, spec: ContainerSpec, now: float) -> None: ...

    def stop(self, instance_id: int, now: float) -> None: ...

    def destroy(self, instance_id: int, now: float) -> None: ...

    def signal(self, instance_id: int, sig: int, now: float) -> bool: ...

    def step(self, now: float) -> list[int]: ...

    def next_wakeup(self) -> float | None: ...

    def logs(self, instance_id: int) -> str: ...

    def shutdown(self) -> None: ...
