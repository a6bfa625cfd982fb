"""Retry policies, chosen per operation by what a repeat can cost.

- `TRANSIENT` (search, list, show, destroy, bulk destroy, stop, start, label): a repeat is harmless,
  so retry on 429, 502/503/504 and transport errors. A 500 is not retried: vast's 500s are bugs
  that do not go away by asking again.
- `REFUSED_ONLY` (create, reboot): a repeat can double the effect (a second billed instance, a
  second reboot), so retry only when vast certainly did nothing: a 429 (refused) or a connection
  that never reached it. Everything ambiguous goes back to the caller; for create the client turns
  it into `CreateOutcomeUnknownError`.

Waits: vast's `Retry-After` when it gives one (up to `max_retry_after`; a longer one, or the daily
search quota, is not waited out here but returned to the caller, like the official CLI does),
otherwise exponential backoff with jitter. Every call has an overall deadline on the injected clock:
a retry whose wait would cross it is not attempted. tenacity's own stop-after-delay reads the real
monotonic clock, so the deadline is checked here against `Clock.now()` instead, and all sleeping
goes through `Clock.sleep`.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import random
from collections.abc import Callable

import tenacity

from reconciler import clock as clock_mod
from reconciler.vast import errors

_log = logging.getLogger(__name__)
_RETRYABLE_5XX = frozenset({502, 503, 504})


class Policy(enum.Enum):
    TRANSIENT = "transient"
    REFUSED_ONLY = "refused_only"


@dataclasses.dataclass(frozen=True)
class RetrySettings:
    """How hard to try. Seconds are on the injected clock."""

    deadline: float = 120.0
    max_attempts: int = 8
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.deadline < 0 or self.backoff_base < 0:
            raise ValueError("retry settings must be non-negative, with at least one attempt")


def should_retry(policy: Policy, exc: BaseException, settings: RetrySettings) -> bool:
    if isinstance(exc, errors.VastRateLimitError):
        return _honourable(exc, settings)
    if policy is Policy.REFUSED_ONLY:
        return isinstance(exc, errors.VastConnectError)
    if isinstance(exc, errors.VastServerError):
        return exc.status in _RETRYABLE_5XX
    return isinstance(exc, errors.VastTransportError)


def _honourable(exc: errors.VastRateLimitError, settings: RetrySettings) -> bool:
    if isinstance(exc, errors.VastSearchQuotaError):
        return False
    return exc.retry_after is None or exc.retry_after <= settings.max_retry_after


class _Wait:
    """Retry-After if vast named one, else base * 2^(n-1) capped, with jitter in [50%, 100%]."""

    def __init__(self, settings: RetrySettings, rng: random.Random) -> None:
        self._settings = settings
        self._rng = rng

    def __call__(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, errors.VastRateLimitError) and exc.retry_after is not None:
            return exc.retry_after
        s = self._settings
        ceiling = min(s.backoff_max, s.backoff_base * 2.0 ** (state.attempt_number - 1))
        return ceiling * self._rng.uniform(0.5, 1.0)


class _Stop:
    """Stop after `max_attempts`, or when the next wait would end past the deadline."""

    def __init__(self, clock: clock_mod.Clock, deadline_at: float, max_attempts: int) -> None:
        self._clock = clock
        self._deadline_at = deadline_at
        self._max_attempts = max_attempts

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= self._max_attempts:
            return True
        return self._clock.now() + (state.upcoming_sleep or 0.0) > self._deadline_at


def _log_retry(operation: str) -> Callable[[tenacity.RetryCallState], None]:
    def log(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        _log.warning(
            "vast %s failed (%s); attempt %d, retrying in %.2fs",
            operation,
            exc,
            state.attempt_number,
            state.upcoming_sleep,
        )

    return log


def retrying(
    policy: Policy,
    *,
    operation: str,
    settings: RetrySettings,
    clock: clock_mod.Clock,
    deadline_at: float,
    rng: random.Random,
) -> tenacity.Retrying:
    """A tenacity controller for one call; the last error is re-raised as itself."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda exc: should_retry(policy, exc, settings)),
        wait=_Wait(settings, rng),
        stop=_Stop(clock, deadline_at, settings.max_attempts),
        sleep=clock.sleep,
        before_sleep=_log_retry(operation),
        reraise=True,
    )
