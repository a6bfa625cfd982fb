"""Cadences: each watchdog asks its question on its own period (DESIGN.md section 5).

A period is chosen against the cost of what the watchdog prevents, not set globally, so the
schedule keeps one clock per job. The schedule is pure: `due(now)` says which jobs run, `ran`
records that they did; the controller owns the actual sleeping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from reconciler.model.spec import Cadences

# job name -> the Cadences field that sets its period
JOBS: Mapping[str, str] = {
    "reconcile": "reconcile_seconds",
    "orphan_sweep": "orphan_sweep_seconds",
    "idle_scan": "idle_scan_seconds",
    "auto_stop": "auto_stop_seconds",
    "auto_destroy": "auto_destroy_seconds",
    "boot_failure": "boot_failure_seconds",
    "went_silent": "went_silent_seconds",
    "lost": "lost_seconds",
    "pool_idle_release": "pool_idle_release_seconds",
    "queue_wait": "queue_wait_seconds",
    "no_consumer": "no_consumer_seconds",
    "stuck_dispatch": "stuck_dispatch_seconds",
}


@dataclass
class Schedule:
    periods: dict[str, float]
    last: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, cadences: Cadences) -> Schedule:
        return cls({job: float(getattr(cadences, attr)) for job, attr in JOBS.items()})

    def due(self, now: float) -> list[str]:
        return [
            job
            for job, period in self.periods.items()
            if job not in self.last or now - self.last[job] >= period
        ]

    def ran(self, jobs: list[str], now: float) -> None:
        for job in jobs:
            self.last[job] = now

    def retry(self, jobs: list[str], now: float, after: float) -> None:
        """Jobs that could not run (their listing failed): due again `after` seconds from now,
        not at once (a loop) and not a whole period later (a sweep skipped for 5 minutes)."""
        for job in jobs:
            period = self.periods.get(job, after)
            self.last[job] = now - period + min(after, period)

    def next_due(self, now: float) -> float:
        """Seconds until the next job is due (0 when one already is)."""
        waits = [
            max(0.0, self.last.get(job, now - period) + period - now)
            for job, period in self.periods.items()
        ]
        return min(waits) if waits else 60.0

    def retune(self, cadences: Cadences) -> None:
        """New periods after a spec change; the clocks already running are kept."""
        self.periods = Schedule.of(cadences).periods
