"""Clocks for the simulator.

Every time the simulator reads is asked of a clock, so the same code runs in real time behind a
socket and in virtual time, where a test or a benchmark moves days in milliseconds and every
billing interval is exact. `VirtualClock` only moves when told; `RealClock` is the wall clock.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """What the simulator asks of time: seconds since the epoch, and a way to wait."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait; a virtual clock advances instead."""
        ...


class RealClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that moves only when told to (or when something sleeps on it)."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move forward by `seconds` (never backwards)."""
        if seconds < 0:
            raise ValueError("a virtual clock never goes backwards")
        with self._lock:
            self._now += seconds

    def set(self, when: float) -> None:
        """Move forward to `when` (a no-op when `when` is in the past)."""
        with self._lock:
            self._now = max(self._now, when)
