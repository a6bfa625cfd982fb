"""Fixtures shared by every test folder, and the lanes tests run in.

The fast lane (`pytest -m "not e2e and not slow"`: unit tests and the scenario book, under a
minute on 2 cores) leaves out two kinds, marked here by where they live so no file can forget:
`e2e` (real processes end to end: ray-vast commands, containers, Ray) and `slow` (tests that
start real agent or watch processes, or run a benchmark).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.served import world

__all__ = ["world"]

HERE = Path(__file__).parent
# Whole folders or files of each lane (relative to tests/).
E2E = ("e2e/",)
SLOW = (
    "agent/test_endings.py",
    "agent/test_bootloader.py",
    "watch/test_watch_process.py",
    "bench/",
    "vastsim/test_process_runner.py",
    "head/test_service_limits.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.fspath)).relative_to(HERE).as_posix()
        if where.startswith(E2E):
            item.add_marker(pytest.mark.e2e)
        if where.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
