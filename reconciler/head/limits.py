"""What unproven traffic may cost the head: a token bucket per source address, and a tally of
refusals that reaches the ledger at most once a minute per source and class.

The enrollment port faces the internet and anyone may post to it. A request that proves nothing
(malformed, a made-up token, a report that does not match its instance) must change nothing, and
must not cost a ledger line, an fsync or the records lock each: a stranger could otherwise fill
the ledger and stall the heartbeats that wait on that lock. So refusals of unproven traffic are
counted in memory and noted in aggregate (DESIGN.md 10), and each source gets a token bucket.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# A candidate asks at most every 5 s and reports once; this is far above what a real one sends.
BURST = 20.0
PER_SECOND = 2.0
NOTE_EVERY = 60.0
# Sources remembered at most; a flood from many addresses forgets the oldest, never grows memory.
MAX_SOURCES = 10_000
# Lines a minute per class, all sources together: many addresses (an IPv6 /64) buy no more.
LINES_PER_CLASS = 30


class SourceBuckets:
    """A token bucket per source address (`take` is False: answer 429)."""

    def __init__(self, *, burst: float = BURST, per_second: float = PER_SECOND) -> None:
        self.burst = burst
        self.per_second = per_second
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)
        self._lock = threading.Lock()
        self.refused = 0

    def take(self, source: str, now: float) -> bool:
        with self._lock:
            tokens, at = self._buckets.get(source, (self.burst, now))
            tokens = min(self.burst, tokens + max(0.0, now - at) * self.per_second)
            if len(self._buckets) >= MAX_SOURCES and source not in self._buckets:
                self._buckets.pop(next(iter(self._buckets)))
            if tokens < 1.0:
                self._buckets[source] = (tokens, now)
                self.refused += 1
                return False
            self._buckets[source] = (tokens - 1.0, now)
            return True


@dataclass
class _Count:
    waiting: int = 0  # refusals since the last line
    noted_at: float | None = None
    total: int = 0


class RefusalTally:
    """Refusals of unproven traffic by (source, class): `count` says how many to note now (0:
    nothing this time; the next line, a minute later at the earliest, carries the rest)."""

    def __init__(self, *, every: float = NOTE_EVERY, per_class: int = LINES_PER_CLASS) -> None:
        self.every = every
        self.per_class = per_class
        self._counts: dict[tuple[str, str], _Count] = {}
        self._lines: dict[str, list[float]] = {}  # class -> times of its recent lines
        self._lock = threading.Lock()

    def count(self, source: str, cls: str, now: float) -> int:
        with self._lock:
            key = (source, cls)
            entry = self._counts.get(key)
            if entry is None:
                if len(self._counts) >= MAX_SOURCES:
                    self._counts.pop(next(iter(self._counts)))
                entry = self._counts[key] = _Count()
            entry.waiting += 1
            entry.total += 1
            if entry.noted_at is not None and now - entry.noted_at < self.every:
                return 0
            recent = [t for t in self._lines.get(cls, []) if now - t < self.every]
            if len(recent) >= self.per_class:
                self._lines[cls] = recent
                return 0  # counted; its source's next line, a minute on, carries it
            self._lines[cls] = [*recent, now]
            noted, entry.waiting, entry.noted_at = entry.waiting, 0, now
            return noted

    def totals(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return {key: c.total for key, c in self._counts.items()}
