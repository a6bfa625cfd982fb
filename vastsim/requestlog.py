"""The request log: what a client sent, so tests and benchmarks can count calls.

Each record names the route by its template (`PUT /api/v0/asks/{id}/`), so counting "creates" or
"listings" does not depend on ids. A dropped response is logged with status 0.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    time: float  # the simulator clock
    method: str
    route: str  # "METHOD /template", e.g. "GET /api/v0/instances/{id}/"; "" when no route matched
    path: str
    status: int  # 0: the connection was dropped without a response
    identity: str  # "account", "instance", "none" or "bad"
    body: bytes = b""
    client: str = ""  # the caller's address (a container's own loopback address, with those)

    @property
    def template(self) -> str:
        return self.route.partition(" ")[2]


class RequestLog:
    """Thread-safe, append-only list of `RequestRecord`s."""

    def __init__(self) -> None:
        self._records: list[RequestRecord] = []
        self._lock = threading.Lock()

    def append(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def __iter__(self) -> Iterator[RequestRecord]:
        with self._lock:
            return iter(list(self._records))

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def __getitem__(self, index: int) -> RequestRecord:
        with self._lock:
            return self._records[index]

    def filter(
        self, route: str | None = None, status: int | None = None, method: str | None = None
    ) -> list[RequestRecord]:
        """Records of one route key (or template), status and method; None matches all."""
        return [
            r
            for r in self
            if (route is None or route in (r.route, r.template))
            and (status is None or r.status == status)
            and (method is None or r.method == method)
        ]

    def count(self, route: str | None = None, status: int | None = None) -> int:
        return len(self.filter(route, status))

    def counters(self) -> Counter[str]:
        """Requests per route key."""
        return Counter(r.route or f"{r.method} (no route)" for r in self)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
