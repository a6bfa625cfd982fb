"""The simulated world: one vast.ai account on one market, its clock, its containers and its bill.

`World` wires the pieces together and owns the one lock that guards the simulated world. API
handlers, faults and the life cycle change the world under that lock; container actions (start,
stop, destroy) are queued and handed to the runner after the lock is released, in order, so a
container that calls the API back (a watchdog destroying its own instance) cannot deadlock it.

Time moves in two ways: `advance(seconds)` for a `VirtualClock` (events fire at their exact
times, scripted containers are stepped at every event and whenever they ask), and `step()` at the
clock's current time (the real-time server calls it from a background thread).

The world knows nothing of the API that serves it or of the faults that bend it: those are handed
a world (`vastsim.sim.Sim` puts the three together), so the imports run one way.
"""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Self, TypeVar

from vastsim.billing import Meter
from vastsim.clock import Clock, RealClock, VirtualClock
from vastsim.containers.protocol import FORWARDED_SIGNALS, Runner
from vastsim.containers.scripted import NoContainers
from vastsim.instances import Instance
from vastsim.lifecycle import ContainerAction, Fleet, Timing
from vastsim.listing import Tokens
from vastsim.market import Market
from vastsim.requestlog import RequestLog

T = TypeVar("T")


class World:
    """One account on one market, on a clock, with containers and a bill (no API, no faults)."""

    def __init__(
        self,
        *,
        market: Market | None = None,
        clock: Clock | None = None,
        api_key: str = "vastsim",
        admin_key: str | None = None,
        runner: Runner | None = None,
        timing: Timing | None = None,
        initial_credit: float = 1000.0,
        first_instance_id: int = 20_000_001,
    ) -> None:
        self.clock: Clock = clock if clock is not None else RealClock()
        self.market = market if market is not None else Market.default()
        self.runner: Runner = runner if runner is not None else NoContainers()
        self.api_key = api_key
        self.admin_key = admin_key
        self.initial_credit = initial_credit
        self.started_at = self.clock.now()
        self.lock = threading.RLock()
        self._flush_lock = threading.RLock()
        self._step_lock = threading.RLock()
        self.meter = Meter(self.clock.now)
        self.requests = RequestLog()
        self.fleet = Fleet(
            market=self.market,
            meter=self.meter,
            runner=self.runner,
            timing=timing if timing is not None else Timing(),
            start=self.started_at,
            first_instance_id=first_instance_id,
        )
        self.tokens = Tokens(secrets.token_bytes(16))
        self.instance_keys: dict[str, int] = {}
        self.ssh_keys: list[dict[str, Any]] = []
        self.files: dict[str, str] = {}
        self._last_runner_step: float | None = None
        self._runner_dirty = False
        self._closed = False

    # -- read access --------------------------------------------------------------------------

    @property
    def base_url(self) -> str | None:
        """Where the API is served (given to containers as `VAST_URL`); set by `serve`."""
        return self.fleet.base_url

    @base_url.setter
    def base_url(self, url: str | None) -> None:
        self.fleet.base_url = url

    @property
    def timing(self) -> Timing:
        return self.fleet.timing

    @property
    def instances(self) -> Mapping[int, Instance]:
        """Live instances (a snapshot)."""
        with self.lock:
            return MappingProxyType(dict(self.fleet.instances))

    def instance(self, instance_id: int) -> Instance | None:
        """A live or destroyed instance."""
        with self.lock:
            return self.fleet.instances.get(instance_id) or self.fleet.gone.get(instance_id)

    @property
    def counters(self) -> Counter[str]:
        """Requests per route key, e.g. `sim.counters["PUT /api/v0/asks/{id}/"]`."""
        return self.requests.counters()

    # -- changing the world -------------------------------------------------------------------

    def mutate(self, change: Callable[[float], T]) -> T:
        """Run `change(now)` under the lock, then hand queued container actions to the runner."""
        with self.lock:
            result = change(self.clock.now())
        self.flush()
        return result

    def flush(self) -> None:
        """Execute queued container actions, in order, outside the world lock."""
        with self._flush_lock:
            with self.lock:
                actions = self.fleet.take_actions()
            for action in actions:
                self._execute(action)
            if actions:
                self._runner_dirty = True

    def _execute(self, action: ContainerAction) -> None:
        if action.kind == "start" and action.spec is not None:
            with self.lock:
                wanted = self.fleet.should_run(action.instance_id, action.spec.boot)
            if wanted:
                self.runner.start(action.spec, action.at)
        elif action.kind == "stop":
            self.runner.stop(action.instance_id, action.at)
        elif action.kind == "destroy":
            self.runner.destroy(action.instance_id, action.at)

    def signal_from_inside(self, instance_id: int, sig: int) -> bool:
        """Send `sig` to PID 1 from inside the container. TERM, INT and HUP reach it; KILL, QUIT,
        USR1, USR2, CONT and the rest have no effect (the kernel drops them for PID 1).
        Returns whether the signal was delivered."""
        if sig not in FORWARDED_SIGNALS:
            return False
        with self.lock:
            if not self.fleet.container_up(instance_id):
                return False
        delivered = self.runner.signal(instance_id, sig, self.clock.now())
        self._runner_dirty = True
        return delivered

    def publish(self, base_url: str, text: str) -> str:
        """Keep `text` at a result URL (what request_logs and command answer with)."""
        token = secrets.token_hex(16)
        self.files[token] = text
        return f"{base_url}/static/instance_logs/{token}.log"

    # -- time ---------------------------------------------------------------------------------

    def step(self) -> None:
        """Run the life cycles and the containers at the clock's current time."""
        self._process(self.clock.now())

    def advance(self, seconds: float) -> None:
        """Virtual time: move the clock by `seconds`, firing every event at its own time and
        stepping scripted containers at each event and at each time they asked for."""
        clock = self.clock
        if not isinstance(clock, VirtualClock):
            raise TypeError("advance() needs a VirtualClock; use step() in real time")
        if seconds < 0:
            raise ValueError("time does not go backwards")
        target = clock.now() + seconds
        while True:
            when = self._next_time(target)
            if when is None:
                break
            clock.set(when)
            self._process(when)
        clock.set(target)
        self._process(target)

    def _next_time(self, target: float) -> float | None:
        now = self.clock.now()
        with self.lock:
            event = self.fleet.next_event_time()
        wake = self.runner.next_wakeup()
        candidates = []
        if event is not None and event <= target:
            candidates.append(max(event, now))
        if wake is not None:
            wake = max(wake, now)
            stepped = self._last_runner_step
            fresh = stepped is None or wake > stepped or self._runner_dirty
            if wake <= target and fresh:
                candidates.append(wake)
        return min(candidates) if candidates else None

    def _process(self, now: float) -> None:
        with self._step_lock:
            with self.lock:
                self.fleet.run_due(now)
            self.flush()
            self._runner_dirty = False
            exited = self.runner.step(now)
            self._last_runner_step = now
            if exited:
                with self.lock:
                    for instance_id in exited:
                        self.fleet.container_exited(instance_id, now)

    # -- the end ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Destroy every instance and stop every container (idempotent)."""
        if self._closed:
            return
        self._closed = True

        def destroy_all(now: float) -> None:
            for inst in list(self.fleet.instances.values()):
                self.fleet.destroy(inst, now)

        self.mutate(destroy_all)
        self.runner.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()
