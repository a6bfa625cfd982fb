"""Tunables of the vast client: pacing, retries, paging. Seconds are on the injected clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from reconciler.vast import endpoints, retry


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """How the client paces, retries and pages.

    `min_intervals` maps a route (see `endpoints`) to the minimum seconds between two calls;
    `pacing=False` turns pacing off (for a proxy that paces for us, or a simulator run that wants
    raw throughput). `timeout` is for the httpx client the factory builds.
    """

    retry: retry.RetrySettings = dataclasses.field(default_factory=retry.RetrySettings)
    min_intervals: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: dict(endpoints.DEFAULT_MIN_INTERVALS)
    )
    pacing: bool = True
    page_size: int = 25
    max_pages: int = 10_000
    excerpt_chars: int = 256
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= 25:
            raise ValueError("vast serves at most 25 instances a page")
        if self.max_pages < 1 or self.timeout <= 0:
            raise ValueError("max_pages and timeout must be positive")
