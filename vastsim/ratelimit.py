"""vast's rate limits: a minimum interval per endpoint and per identity.

The thresholds are the `x-rate-limit` values of vast's API documentation (seconds between two
requests to one endpoint from one identity: key + client address); search is "10 per minute".
A request inside the interval gets a 429 and does not move the window. Off by default.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from vastsim.wire import JSON, Response, text_response

VAST_THRESHOLDS: dict[str, float] = {
    "GET /api/v1/instances/": 1.0,
    "GET /api/v0/instances/{id}/": 2.0,
    "PUT /api/v0/instances/{id}/": 1.0,
    "DELETE /api/v0/instances/{id}/": 3.0,
    "PUT /api/v0/instances/reboot/{id}/": 1.0,
    "PUT /api/v0/instances/recycle/{id}/": 1.0,
    "PUT /api/v0/asks/{id}/": 4.5,
    "PUT /api/v0/instances/bid_price/{id}/": 5.5,
    "PUT /api/v0/instances/command/{id}/": 1.5,
    "POST /api/v0/instances/{id}/ssh/": 1.0,
    "POST /api/v0/bundles/": 6.0,
    "PUT /api/v0/search/asks/": 6.0,
}

STYLES = ("text", "detail", "json", "quota")


def too_many_requests(
    style: str, threshold: float, retry_after: float | None = None, reset_at: float | None = None
) -> Response:
    """A 429 in one of the shapes vast uses."""
    headers: list[tuple[str, str]] = []
    if retry_after is not None:
        headers.append(("Retry-After", _number(retry_after)))
    if style == "text":
        response = text_response(429, f"API requests too frequent: endpoint threshold={threshold}")
    elif style == "detail":
        body: dict[str, Any] = {
            "detail": f"API requests too frequent endpoint threshold={threshold}"
        }
        response = Response(429, json.dumps(body).encode(), JSON)
    elif style == "json":
        body = {
            "success": False,
            "error": "rate_limit_exceeded",
            "msg": "API requests too frequent",
        }
        response = Response(429, json.dumps(body).encode(), JSON)
    elif style == "quota":
        body = {
            "success": False,
            "error": "search_quota_exceeded",
            "msg": "Daily search quota exceeded",
        }
        headers.append(("X-RateLimit-Reset", str(int(reset_at or 0))))
        response = Response(429, json.dumps(body).encode(), JSON)
    else:
        raise ValueError(f"unknown 429 style {style!r}; one of {STYLES}")
    return Response(429, response.body, response.content_type, tuple(headers))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class RateLimiter:
    """Minimum intervals per (route, identity)."""

    def __init__(self) -> None:
        self.thresholds: dict[str, float] = {}
        self.style = "detail"
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def enable(self, thresholds: dict[str, float] | None = None, style: str = "detail") -> None:
        if style not in STYLES:
            raise ValueError(f"unknown 429 style {style!r}")
        with self._lock:
            self.thresholds = dict(VAST_THRESHOLDS if thresholds is None else thresholds)
            self.style = style
            self._last.clear()

    def disable(self) -> None:
        with self._lock:
            self.thresholds = {}
            self._last.clear()

    def check(self, route: str, identity: str, now: float) -> Response | None:
        """None when the request may pass (and it then opens a new window)."""
        with self._lock:
            threshold = self.thresholds.get(route)
            if threshold is None:
                return None
            last = self._last.get((route, identity))
            if last is not None and now - last < threshold:
                return too_many_requests(self.style, threshold)
            self._last[(route, identity)] = now
            return None
