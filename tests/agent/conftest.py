"""Agent worlds: the head over real TLS and a served vastsim whose containers are real process
groups running the real bootloader and agent (shrunken thresholds, a fake `ray`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import pytest

from vastsim import ProcessRunner

from ..head.harness import HeadWorld, head_world, venv_path

FAKE_RAY = Path(__file__).with_name("fake_ray.py")
WorldFactory = Callable[..., HeadWorld]


@pytest.fixture
def agent_world(tmp_path: Path) -> Iterator[WorldFactory]:
    """`agent_world(**head_world kwargs)`: a head whose candidates run the agent for real."""
    with ExitStack() as stack:

        def make(**kw: object) -> HeadWorld:
            runner = ProcessRunner(
                tmp_path / "containers",
                stop_grace=1.0,
                base_env={"PATH": venv_path(), "LANG": "C.UTF-8"},
            )
            agent_env = {"RV_RAY_COMMAND": f"{sys.executable} {FAKE_RAY}"}
            agent_env.update(kw.pop("agent_env", {}))  # type: ignore[arg-type]
            kw.setdefault("python", sys.executable)
            context: AbstractContextManager[HeadWorld] = head_world(
                tmp_path, runner=runner, agent_env=agent_env, **kw
            )
            return stack.enter_context(context)

        yield make
