"""The one place that reads the wall clock.

Decisions are pure functions of `now`; everything that needs the time is handed a `Clock`, so
tests and the virtual-time benchmarks can run days in seconds. Times are float seconds since the
epoch throughout ray-vast: they serialise to JSON without ceremony and subtract without surprises.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

# The shortest real wait of `SystemClock.wait`, in seconds.
WAIT_FLOOR = 0.05


class Clock(Protocol):
    """What the code below the CLI may ask of time."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a fake clock advances instead."""
        ...

    def wait(self, stop: threading.Event, seconds: float) -> None:
        """Wait `seconds`, or less if `stop` is set meanwhile (a signal wakes the watch loop at
        once); a fake clock advances instead, since nothing can set `stop` while it does."""
        ...


class SystemClock:
    """The real clock, used only by the CLI when it builds its dependencies."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, stop: threading.Event, seconds: float) -> None:
        # Never less than WAIT_FLOOR: a loop with nothing due yet does not spin.
        stop.wait(max(seconds, WAIT_FLOOR))


class FakeClock:
    """A clock that moves only when told to, or when something sleeps on it."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def wait(self, stop: threading.Event, seconds: float) -> None:
        self.sleep(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
