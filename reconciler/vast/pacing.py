"""Client-side pacing: do not provoke vast's 429s in the first place.

vast limits each endpoint to a minimum interval between calls per identity. Every thread that
uses one client shares one `Pacer`, which hands out time slots per route: a caller reserves the
next free slot under a lock and then waits for it outside the lock, so concurrent callers queue up
one interval apart instead of all firing at once. A 429 with `Retry-After` pushes the route's next
slot out for everyone (`hold_off`), not only for the caller that got it.

Waiting goes through the injected clock, so virtual-time runs never really sleep.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from reconciler import clock as clock_mod


class Pacer:
    """Per-route minimum intervals, shared by every thread using the client."""

    def __init__(
        self,
        clock: clock_mod.Clock,
        intervals: Mapping[str, float],
        *,
        enabled: bool = True,
    ) -> None:
        self._clock = clock
        self._intervals = dict(intervals)
        self._enabled = enabled
        self._next_free: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait_turn(self, route: str) -> float:
        """Block until `route` may be called again; returns the seconds waited."""
        if not self._enabled:
            return 0.0
        with self._lock:
            now = self._clock.now()
            slot = max(now, self._next_free.get(route, now))
            self._next_free[route] = slot + self._intervals.get(route, 0.0)
        delay = slot - now
        if delay > 0:
            self._clock.sleep(delay)
        return delay

    def hold_off(self, route: str, seconds: float) -> None:
        """vast told us to wait: no caller gets `route` for `seconds` from now."""
        if not self._enabled or seconds <= 0:
            return
        with self._lock:
            until = self._clock.now() + seconds
            self._next_free[route] = max(self._next_free.get(route, until), until)
