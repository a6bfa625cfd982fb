"""The e2e tests' one way to bring a cluster up: the fixture `upped` (see tests/e2e/upped.py).

A factory rather than a plain fixture, because tests differ in what they bring up (the README's
example as written, a copy of it in another shape, two clusters at once); each gets the same
setup and the same teardown, whatever happened in the test.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.e2e.upped import Spec, Up, UpCluster, running_up


@pytest.fixture
def upped(tmp_path: Path) -> Iterator[UpCluster]:
    """`upped(*specs)`: `ray-vast up` on these clusters (none: examples/clusters/local-sim.yaml),
    once per test, every Ray head up; stopped, taken down and checked for leftovers after it."""
    started: list[Up] = []
    with ExitStack() as stack:

        def up(*specs: Spec) -> Up:
            assert not started, "one up per test: it has one state directory"
            started.append(stack.enter_context(running_up(tmp_path, specs)))
            return started[0]

        yield up
