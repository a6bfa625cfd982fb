"""The one place that reads the wall clock.

Decisions are pure functions of `now`; everything that needs the time is handed a `Clock`, so
tests and the virtual-time benchmarks can run days in seconds. Times are float seconds since the
epoch throughout ray-vast: they serialise to JSON without ceremony and subtract without surprises.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the code below the CLI may ask of time."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a fake clock advances instead."""
        ...


class SystemClock:
    """The real clock, used only by the CLI when it builds its dependencies."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


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

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
