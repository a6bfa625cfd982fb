"""Helpers for the vast client tests: a scripted vast behind `httpx.MockTransport`, wire rows.

`ScriptedVast` answers each (method, path) from a queue of replies the test lines up, records every
request, and fails the test on a request nobody scripted, so a test also proves which calls were
*not* made (a second create, a retry that should not happen).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

BASE_URL = "http://vast.test"
API_KEY = "k3y-0123456789abcdef-SECRET"

Reply = Callable[[httpx.Request], httpx.Response]


def reply(
    status: int = 200,
    body: Any = None,
    *,
    text: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """A fresh response per request: JSON `body`, or raw `text` (HTML, plain-text 429s)."""

    def make(request: httpx.Request) -> httpx.Response:
        if text is not None:
            return httpx.Response(status, text=text, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return make


def fail(exc_type: type[httpx.TransportError], message: str = "boom") -> Reply:
    """A transport failure instead of a response, raised the way httpx raises it."""

    def raise_(request: httpx.Request) -> httpx.Response:
        raise exc_type(message, request=request)

    return raise_


class ScriptedVast:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._queues: dict[tuple[str, str], collections.deque[Reply]] = collections.defaultdict(
            collections.deque
        )

    def on(self, method: str, path: str, *replies: Reply) -> ScriptedVast:
        self._queues[(method, path)].extend(replies)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self._queues.get((request.method, request.url.path))
        if not queue:
            pytest.fail(f"unscripted request {request.method} {request.url}")
        return queue.popleft()(request)

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def bodies(self, method: str, path: str) -> list[Any]:
        return [json.loads(r.content) for r in self.calls(method, path)]

    def unused(self) -> dict[tuple[str, str], int]:
        return {k: len(q) for k, q in self._queues.items() if q}


def offer_row(offer_id: int, dph_total: float, **extra: Any) -> dict[str, Any]:
    return {
        "id": offer_id,
        "machine_id": offer_id * 10,
        "host_id": 7,
        "dph_total": dph_total,
        **extra,
    }


def instance_row(instance_id: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": instance_id,
        "label": f"rv.c.abcdef12.{instance_id}",
        "actual_status": "running",
        "intended_status": "running",
        "start_date": 1_790_000_000.0,
        "extra_env": [],
    }
    row.update(extra)
    return row


def page(rows: list[dict[str, Any]], next_token: str | None) -> dict[str, Any]:
    return {
        "success": True,
        "instances_found": len(rows),
        "total_instances": len(rows),
        "label_counts": {},
        "next_token": next_token,
        "instances": rows,
    }
