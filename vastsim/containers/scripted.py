"""Runners without processes: scripted containers, and none at all.

`ScriptedRunner` runs no processes: a `Behaviour` object per boot decides what the container does.
Its `stop_grace` is docker stop's: with it, a stopped container's PID 1 has had TERM (`on_stop`)
and is still stepped until the grace is over (it may report, or destroy its own instance, as a
real agent does within those seconds), then it is killed. Without it (the default) a stop ends
the container at once. Both keep to virtual time: nothing here reads a clock or sleeps.

`NoContainers` is the life cycle alone (the default when the simulator is given no runner).
`FakePorts` gives both distinct port numbers without binding sockets.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping

from vastsim.containers.protocol import ContainerSpec


class FakePorts:
    """Host ports for runners without real sockets: distinct numbers from a counter."""

    def __init__(self, first: int = 40_000) -> None:
        self._next = itertools.count(first)
        self._lock = threading.Lock()

    def allocate_ports(self, instance_id: int, wanted: list[str]) -> dict[str, int]:
        with self._lock:
            return {key: next(self._next) for key in wanted}


class Container:
    """What a behaviour sees of its container: the spec, a log, and a way for PID 1 to exit."""

    def __init__(self, spec: ContainerSpec, log: list[str]) -> None:
        self.spec = spec
        self._log = log
        self.exit_code: int | None = None

    @property
    def instance_id(self) -> int:
        return self.spec.instance_id

    @property
    def env(self) -> Mapping[str, str]:
        return self.spec.env

    def log(self, text: str) -> None:
        """Append to the container's stdout (what request_logs serves)."""
        self._log.append(text if text.endswith("\n") else text + "\n")

    def exit(self, code: int = 0) -> None:
        """PID 1 exits; vast will start the container again."""
        if self.exit_code is None:
            self.exit_code = code


class Behaviour:
    """What a scripted container does. Override what you need; the default idles forever and
    exits on TERM, INT and HUP (128 + signal number), as a process with default handlers would."""

    def on_start(self, container: Container, now: float) -> None:
        """The container has just booted."""

    def step(self, container: Container, now: float) -> None:
        """Time has moved to `now`; do work, maybe call `container.exit(code)`."""

    def next_wakeup(self, container: Container) -> float | None:
        """The next time this container wants `step` (None: only when something happens)."""
        return None

    def on_signal(self, container: Container, sig: int, now: float) -> None:
        container.exit(128 + sig)

    def on_stop(self, container: Container, now: float) -> None:
        """docker stop: the container ends (it may boot again later)."""

    def on_destroy(self, container: Container, now: float) -> None:
        """The instance is destroyed."""


BehaviourFactory = Callable[[ContainerSpec], Behaviour]


class ScriptedRunner(FakePorts):
    """Containers as Python objects: no processes, virtual-time friendly."""

    def __init__(
        self,
        factory: BehaviourFactory | None = None,
        *,
        stop_grace: float = 0.0,
        loopback_ips: bool = False,
    ) -> None:
        super().__init__()
        self._factory: BehaviourFactory = factory or (lambda spec: Behaviour())
        self.stop_grace = stop_grace
        self.loopback_ips = loopback_ips
        self._live: dict[int, tuple[Container, Behaviour]] = {}
        # stopped containers inside docker stop's grace: (container, behaviour, killed at)
        self._dying: dict[int, tuple[Container, Behaviour, float]] = {}
        self._logs: dict[int, list[str]] = {}
        self._exited: list[int] = []
        self._lock = threading.Lock()
        self.boots: dict[int, int] = {}

    def start(self, spec: ContainerSpec, now: float) -> None:
        behaviour = self._factory(spec)
        with self._lock:
            log = self._logs.setdefault(spec.instance_id, [])
            container = Container(spec, log)
            self._live[spec.instance_id] = (container, behaviour)
            self.boots[spec.instance_id] = spec.boot
        behaviour.on_start(container, now)

    def stop(self, instance_id: int, now: float) -> None:
        """docker stop: TERM to PID 1 (`on_stop`), KILL once `stop_grace` is over."""
        with self._lock:
            entry = self._live.pop(instance_id, None)
            if entry is not None and self.stop_grace > 0:
                self._dying[instance_id] = (entry[0], entry[1], now + self.stop_grace)
        if entry is not None:
            entry[1].on_stop(entry[0], now)

    def destroy(self, instance_id: int, now: float) -> None:
        with self._lock:
            entry = self._live.pop(instance_id, None)
            dying = self._dying.pop(instance_id, None)
            self._logs.pop(instance_id, None)
        for ended in (entry, dying[:2] if dying else None):
            if ended is not None:
                ended[1].on_destroy(ended[0], now)

    def signal(self, instance_id: int, sig: int, now: float) -> bool:
        with self._lock:
            entry = self._live.get(instance_id)
        if entry is None:
            return False
        entry[1].on_signal(entry[0], sig, now)
        return True

    def step(self, now: float) -> list[int]:
        with self._lock:
            live = list(self._live.items())
            for instance_id, (container, _, kill_at) in list(self._dying.items()):
                if now >= kill_at or container.exit_code is not None:
                    del self._dying[instance_id]  # KILL, or PID 1 is gone: the stop is done
            dying = list(self._dying.values())
        for container, behaviour, _ in dying:
            behaviour.step(container, now)
        for _, (container, behaviour) in live:
            if container.exit_code is None:
                behaviour.step(container, now)
        exited = []
        with self._lock:
            for instance_id, (container, _) in live:
                current = self._live.get(instance_id)
                if (
                    container.exit_code is not None
                    and current is not None
                    and (current[0] is container)
                ):
                    del self._live[instance_id]
                    exited.append(instance_id)
        return exited

    def next_wakeup(self) -> float | None:
        with self._lock:
            live = list(self._live.values())
            dying = list(self._dying.values())
        times = [t for c, b in live if (t := b.next_wakeup(c)) is not None]
        for container, behaviour, kill_at in dying:
            wake = behaviour.next_wakeup(container)
            times.append(kill_at if wake is None else min(wake, kill_at))
        if any(c.exit_code is not None for c, _ in live):
            return float("-inf")
        return min(times) if times else None

    def running(self, instance_id: int) -> Container | None:
        """The live container of an instance, for assertions."""
        with self._lock:
            entry = self._live.get(instance_id)
        return None if entry is None else entry[0]

    def behaviour(self, instance_id: int) -> Behaviour | None:
        with self._lock:
            entry = self._live.get(instance_id)
        return None if entry is None else entry[1]

    def logs(self, instance_id: int) -> str:
        with self._lock:
            return "".join(self._logs.get(instance_id, []))

    def shutdown(self) -> None:
        with self._lock:
            ids = sorted(set(self._live) | set(self._dying))
        for instance_id in ids:
            self.destroy(instance_id, 0.0)


class NoContainers(FakePorts):
    """No containers at all: the life cycle alone (the default when no runner is given)."""

    def __init__(self, *, loopback_ips: bool = False) -> None:
        super().__init__()
        self.loopback_ips = loopback_ips

    def start(self, spec: ContainerSpec, now: float) -> None:
        """Nothing runs."""

    def stop(self, instance_id: int, now: float) -> None:
        """Nothing runs."""

    def destroy(self, instance_id: int, now: float) -> None:
        """Nothing runs."""

    def signal(self, instance_id: int, sig: int, now: float) -> bool:
        return False

    def step(self, now: float) -> list[int]:
        return []

    def next_wakeup(self) -> float | None:
        return None

    def logs(self, instance_id: int) -> str:
        return ""

    def shutdown(self) -> None:
        """Nothing runs."""
