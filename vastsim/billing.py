"""The billing meter: the ground truth for every money figure of the project.

vast bills per second: `dph_total` while an instance runs, the storage part alone
(disk x storage_cost / 720 per hour) while it exists in any other state, nothing after destroy.
The meter keeps, per instance, the intervals between rate changes as the life cycle reports them
(with the exact time of each transition), so a virtual-time day is exact to the cent: the charge is
a correctly rounded sum of rate x seconds, never an accumulation of ticks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Segment:
    """A stretch of time billed at one rate ($/h). `end` is None while it is still open."""

    start: float
    end: float | None
    rate: float
    status: str | None

    def cost(self, until: float) -> float:
        end = until if self.end is None else min(self.end, until)
        return max(0.0, end - self.start) * self.rate / 3600.0


class Meter:
    """Per-instance billing, queryable per instance, per label prefix and in total."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._segments: dict[int, list[Segment]] = {}
        self._labels: dict[int, str | None] = {}
        self._lock = threading.Lock()

    # -- recording (called by the life cycle) ------------------------------------------------------

    def open(
        self, instance_id: int, at: float, rate: float, status: str | None, label: str | None
    ) -> None:
        with self._lock:
            self._segments[instance_id] = [Segment(at, None, rate, status)]
            self._labels[instance_id] = label

    def change(self, instance_id: int, at: float, rate: float, status: str | None) -> None:
        """From `at` on, bill `rate` (a no-op when neither rate nor status changes)."""
        with self._lock:
            segments = self._segments.get(instance_id)
            if not segments or segments[-1].end is not None:
                return
            last = segments[-1]
            if last.rate == rate and last.status == status:
                return
            at = max(at, last.start)
            if at == last.start:
                segments[-1] = Segment(at, None, rate, status)
            else:
                last.end = at
                segments.append(Segment(at, None, rate, status))

    def close(self, instance_id: int, at: float) -> None:
        with self._lock:
            segments = self._segments.get(instance_id)
            if segments and segments[-1].end is None:
                segments[-1].end = max(at, segments[-1].start)

    def relabel(self, instance_id: int, label: str | None) -> None:
        with self._lock:
            if instance_id in self._labels:
                self._labels[instance_id] = label

    # -- queries ------------------------------------------------------------------------------

    def instance(self, instance_id: int, at: float | None = None) -> float:
        """Dollars charged for one instance up to `at` (default: now)."""
        until = self._now() if at is None else at
        with self._lock:
            return math.fsum(s.cost(until) for s in self._segments.get(instance_id, []))

    def total(self, at: float | None = None) -> float:
        until = self._now() if at is None else at
        with self._lock:
            return math.fsum(s.cost(until) for segs in self._segments.values() for s in segs)

    def label_prefix(self, prefix: str, at: float | None = None) -> float:
        """Dollars of every instance whose (latest) label starts with `prefix`."""
        until = self._now() if at is None else at
        with self._lock:
            return math.fsum(
                s.cost(until)
                for instance_id, segs in self._segments.items()
                if (self._labels.get(instance_id) or "").startswith(prefix)
                for s in segs
            )

    def segments(self, instance_id: int) -> list[Segment]:
        with self._lock:
            return [
                Segment(s.start, s.end, s.rate, s.status)
                for s in self._segments.get(instance_id, [])
            ]

    def rate(self, instance_id: int) -> float:
        """The $/h being billed right now (0 once destroyed)."""
        with self._lock:
            segments = self._segments.get(instance_id)
            if not segments or segments[-1].end is not None:
                return 0.0
            return segments[-1].rate

    def instance_ids(self) -> list[int]:
        with self._lock:
            return list(self._segments)
