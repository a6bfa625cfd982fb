"""Containment: a failure in one cluster's part of a tick stays in that cluster.

A cluster whose listing, plan or nets raise sits out its ticks until a retry that backs off (5 s
doubling to 5 min, as kopf's throttler backs off a handler that failed); the other clusters go
on in the same tick. A step no one cluster owns (a read of Ray, a prune) that raises counts as
"unknown" for this tick. Each run of failures is ledgered once, not once per retry: a long vast
outage must not fill the ledger. The runner's own loop backs off on the same `Backoff`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from reconciler import settings
from reconciler.state.clusterlog import ClusterLog
from reconciler.state.errors import LockLostError
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerSink

log = logging.getLogger("ray_vast")
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """The wait before attempt n+1 after n failures in a row: `first` doubling to `cap`."""

    first: float = settings.FAILURE_BACKOFF_FIRST_SECONDS
    cap: float = settings.FAILURE_BACKOFF_MAX_SECONDS

    def after(self, attempts: int) -> float:
        return min(self.first * 2.0 ** (attempts - 1), self.cap)


# A cluster whose part of a tick raised is retried on this backoff (temporary errors).
FAILURE_BACKOFF = Backoff()


@dataclass
class Failing:
    """A cluster whose part of a tick raised: how many times in a row, and when to retry."""

    attempts: int
    retry_at: float
    error: str


@dataclass
class Containment:
    """The clusters failing now and the shared steps failing now, with their backoff."""

    ledger: LedgerSink
    backoff: Backoff = FAILURE_BACKOFF
    failing: dict[str, Failing] = field(default_factory=dict)
    shared_failing: set[str] = field(default_factory=set)
    failed_now: set[str] = field(default_factory=set)  # the clusters that failed this tick

    def begin_tick(self) -> None:
        self.failed_now = set()

    def sits_out(self, name: str, now: float) -> bool:
        """A failing cluster's jobs stay due, but it waits for its retry."""
        failing = self.failing.get(name)
        return failing is not None and now < failing.retry_at

    def ok(self, name: str) -> bool:
        """Nothing of `name` failed in this tick."""
        return name not in self.failed_now

    def wait(self, name: str, wait: float, now: float) -> float:
        """A wake-up of `name`, no sooner than its retry."""
        failing = self.failing.get(name)
        return wait if failing is None else max(wait, failing.retry_at - now)

    def cluster_failed(self, name: str, part: str, exc: BaseException, now: float) -> None:
        """One cluster's part of the tick raised: it sits out until its backed-off retry. The
        ledger has one line for the whole run of failures. A lost state lock is no cluster's
        failure: the controller is no longer the state's writer, and stops."""
        _unless_lost(exc)
        self.failed_now.add(name)
        previous = self.failing.get(name)
        attempts = previous.attempts + 1 if previous else 1
        delay = self.backoff.after(attempts)
        error = f"{type(exc).__name__}: {exc}"
        self.failing[name] = Failing(attempts, now + delay, error)
        cluster = self._log(name)
        if previous is None:  # the first of a run: the log and the ledger, in one call
            line = f"{part} failed ({error}); retried in {delay:.0f} s"
            ledger = f"{part} failed: {error}; retried with backoff"
            data = _data(part, exc)
            cluster.note(logging.ERROR, "tick_failed", line, ledger=ledger, data=data, exc_info=exc)
        elif previous.error != error:
            line = f"{part} failed ({error}); retried in {delay:.0f} s"
            cluster.say(logging.ERROR, "tick_failed", line, exc_info=exc)
        else:
            again = f"{attempts} times in a row ({error}); retried in {delay:.0f} s"
            cluster.say(logging.WARNING, "tick_failed", f"{part} failed again, {again}")

    def recovered(self, name: str) -> None:
        """A failing cluster ran a whole tick: its run of failures ends (and is ledgered)."""
        if name not in self.failing or not self.ok(name):
            return
        failing = self.failing.pop(name)
        self._log(name).note(
            logging.INFO,
            "tick_recovered",
            f"ticks again after {failing.attempts} failed attempt(s) ({failing.error})",
            data={"attempts": failing.attempts},
        )

    def shared(self, part: str, step: Callable[[], T], unknown: T, clusters: Iterable[str]) -> T:
        """A step no one cluster owns: when it raises, its answer is `unknown` for this tick;
        logged with the traceback and ledgered once per run of failures (under every cluster),
        tried again at the next tick."""
        try:
            value = step()
        except Exception as exc:
            self.shared_failed(part, exc, clusters)
            return unknown
        if part in self.shared_failing:
            self.shared_failing.discard(part)
            log.info("%s works again", part)
        return value

    def shared_failed(self, part: str, exc: Exception, clusters: Iterable[str]) -> None:
        _unless_lost(exc)
        error = f"{type(exc).__name__}: {exc}"
        if part in self.shared_failing:
            log.warning("%s failed again (%s); unknown this tick", part, error)
            return
        self.shared_failing.add(part)
        log.error("%s failed (%s); unknown this tick", part, error, exc_info=exc)
        message = f"{part} failed: {error}; unknown until it works again"
        for name in clusters:
            event = LedgerEvent(
                name, LedgerKind.NOTE, "tick_failed", message, data=_data(part, exc)
            )
            self.ledger.append(event)

    def _log(self, name: str) -> ClusterLog:
        return ClusterLog(name, self.ledger, log)


def _data(part: str, exc: BaseException) -> dict[str, object]:
    return {"part": part, "error_type": type(exc).__name__, "error": str(exc)}


def _unless_lost(exc: BaseException) -> None:
    """Re-raise a lost state lock (`LockLostError`): nothing may go on acting on vast."""
    if isinstance(exc, LockLostError):
        raise exc
