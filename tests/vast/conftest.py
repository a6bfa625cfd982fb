"""Fixtures for the vast client tests: a scripted vast, a fake clock, clients built on both."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from reconciler.clock import FakeClock
from reconciler.vast import ClientSettings, RetrySettings, VastClient

from .vast_helpers import API_KEY, BASE_URL, ScriptedVast


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def vast() -> ScriptedVast:
    return ScriptedVast()


@pytest.fixture
def make_client(vast: ScriptedVast, clock: FakeClock) -> Iterator[Callable[..., VastClient]]:
    """Build clients on the scripted vast; pacing is off unless a test asks for it."""
    made: list[VastClient] = []

    def make(
        *, pacing: bool = False, retry: RetrySettings | None = None, **settings: Any
    ) -> VastClient:
        client = VastClient(
            http=httpx.Client(transport=httpx.MockTransport(vast)),
            base_url=BASE_URL,
            api_key=API_KEY,
            clock=clock,
            settings=ClientSettings(pacing=pacing, retry=retry or RetrySettings(), **settings),
            rng=random.Random(7),
            owns_http=True,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(make_client: Callable[..., VastClient]) -> VastClient:
    return make_client()
