"""How the agent runs `ray start` (issue 24: `up` -> the first worker within 6 s).

A worker's `ray start` asks the GCS for the head node and, while the head's raylet has not
registered, asks again only every 2 s; `up`'s first worker enrolls while the head is still
starting, so it joined up to 2 s after the head was there. The agent runs Ray's own entry point
after a wait of its own for the head (every 50 ms): these tests run that launcher against a
stand-in `ray` package whose GCS client says whether the head is up, and whose `main` records
the command line it was run with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import raynode
from tests.waiting import wait_for

RAY = {
    "head_address": "127.0.0.1:6380",
    "node_ip_address": "127.0.0.9",
    "node_manager_port": 1,
    "object_manager_port": 2,
    "worker_ports": [3, 4],
    "resources": {},
    "labels": {},
    "env": {},
}

STAND_IN = {
    "ray/__init__.py": "",
    "ray/scripts/__init__.py": "",
    "ray/scripts/scripts.py": """
        import json, os, sys
        def main():
            with open(os.environ["RAN"], "w") as out:
                json.dump(sys.argv, out)
            return 0
    """,
    "ray/_raylet.py": """
        import os
        class GcsClient:
            def __init__(self, address):
                self.address = address
            def get_all_node_info(self, timeout, node_selectors, state_filter):
                assert [s.is_head_node for s in node_selectors] == [True] and state_filter == 1
                with open(os.environ["ASKED"], "a") as out:
                    out.write(self.address + "\\n")
                return {"head": 1} if os.path.exists(os.environ["HEAD"]) else {}
    """,
    "ray/core/__init__.py": "",
    "ray/core/generated/__init__.py": "",
    "ray/core/generated/gcs_pb2.py": """
        class GcsNodeInfo:
            class GcsNodeState:
                ALIVE = 1
    """,
    "ray/core/generated/gcs_service_pb2.py": """
        class GetAllNodeInfoRequest:
            class NodeSelector:
                is_head_node = False
    """,
}


def plan(python: str | None, command: tuple[str, ...] = ("ray",)) -> raynode.RayPlan:
    return raynode.ray_plan(
        list(command), RAY, cpus=2, gpus=0, token_path="/t", base_env={}, python=python
    )


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    for name, text in STAND_IN.items():
        path = tmp_path / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "site"),
        "RAN": str(tmp_path / "ran.json"),
        "ASKED": str(tmp_path / "asked"),
        "HEAD": str(tmp_path / "head-is-up"),
    }
    yield tmp_path, env


def launch(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(plan(sys.executable).argv), env=env, stdin=subprocess.DEVNULL)


def test_the_ray_script_of_a_known_python_is_run_by_that_python_after_the_wait() -> None:
    argv = plan("/opt/py/bin/python3").argv
    assert argv[:3] == ("/opt/py/bin/python3", "-c", raynode.HEAD_FIRST)
    assert argv[3:5] == ("start", "--block")
    said = raynode.shown(argv)
    assert said.startswith("ray start --block --address=127.0.0.1:6380 ")
    assert said.endswith("(run by /opt/py/bin/python3 once the head is up)")


@pytest.mark.parametrize(
    ("python", "command"),
    [
        (None, ("ray",)),  # the image's Python was not found: Ray's own script, unchanged
        ("/usr/bin/python3", ("python3", "fake_ray.py")),  # RV_RAY_COMMAND names a program
        ("/usr/bin/python3", ("/opt/bin/my-ray-wrapper",)),  # not the `ray` script
    ],
)
def test_any_other_command_runs_as_it_is(python: str | None, command: tuple[str, ...]) -> None:
    argv = plan(python, command).argv
    assert argv[: len(command) + 2] == (*command, "start", "--block")
    assert raynode.shown(argv) == " ".join(argv)


def test_rays_start_runs_only_once_the_head_is_up_and_with_rays_own_command_line(
    stand_in: tuple[Path, dict[str, str]],
) -> None:
    where, env = stand_in
    proc = launch(env)
    try:
        asked = where / "asked"
        wait_for(lambda: asked.exists() and len(asked.read_text().split()) >= 3, 10, "3 looks")
        assert not (where / "ran.json").exists()  # the head is not up: Ray's start waits
        assert set(asked.read_text().split()) == {"127.0.0.1:6380"}  # the head's GCS
        (where / "head-is-up").touch()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    ran = json.loads((where / "ran.json").read_text())
    assert ran == ["ray", *plan(None).argv[1:]]  # what `ray start ...` itself would have had


def test_a_wait_that_cannot_ask_leaves_the_wait_to_rays_start(
    stand_in: tuple[Path, dict[str, str]],
) -> None:
    where, env = stand_in
    (where / "site" / "ray" / "core" / "generated" / "gcs_pb2.py").unlink()  # another Ray
    proc = launch(env)
    try:
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert json.loads((where / "ran.json").read_text())[:3] == ["ray", "start", "--block"]
    assert not (where / "asked").exists()
