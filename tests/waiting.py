"""The one way tests wait: on a condition, with a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "",
    *,
    step: Callable[[], None] | None = None,
    every: float = 0.02,
) -> Any:
    """Poll until `condition()` is truthy and return its value; fail after `timeout` seconds.
    `step`: run before each look (a simulator that must be advanced to get there). `every`: the
    pause between looks, longer for a look that is itself costly (a `ray status`, a driver)."""
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or condition}")
        time.sleep(every)
