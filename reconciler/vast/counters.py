"""Counts of requests sent to vast, by operation and outcome.

Every HTTP attempt (retries included, since vast's rate limits count them) adds one to
`(operation, outcome)`. The metrics endpoint and the benchmarks ("API calls per tick") read a
snapshot. Outcomes are a small fixed vocabulary so dashboards do not grow a series per message.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

from reconciler.vast import errors

OK = "ok"

_OUTCOME_BY_ERROR: tuple[tuple[type[errors.VastError], str], ...] = (
    # Most specific first: subclasses before their parents.
    (errors.VastSearchQuotaError, "quota_exceeded"),
    (errors.VastRateLimitError, "rate_limited"),
    (errors.VastAuthError, "auth_error"),
    (errors.VastNotFoundError, "not_found"),
    (errors.VastOfferGoneError, "offer_gone"),
    (errors.VastServerError, "server_error"),
    (errors.VastConnectError, "connect_error"),
    (errors.VastTransportError, "transport_error"),
    (errors.VastProtocolError, "protocol_error"),
    (errors.VastRejectedError, "rejected"),
)


def outcome_of(error: errors.VastError | None) -> str:
    if error is None:
        return OK
    for cls, outcome in _OUTCOME_BY_ERROR:
        if isinstance(error, cls):
            return outcome
    return "error"


class RequestCounters:
    """A thread-safe tally; `snapshot()` returns a copy callers may keep."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, operation: str, outcome: str) -> None:
        with self._lock:
            self._counts[(operation, outcome)] += 1

    def snapshot(self) -> Mapping[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)
