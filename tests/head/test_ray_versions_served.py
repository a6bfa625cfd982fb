"""The version check for real: the head service on TLS sockets, a served vastsim whose containers
run the real bootloader and agent (as PID 1), which asks the Python of its `ray` for the Ray and
Python it would run, and sends them when it enrolls."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler import rayruntime
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import Role
from tests.waiting import wait_for
from vastsim import ProcessRunner

from .harness import HeadWorld, head_world, venv_path

FAKE_RAY = Path(__file__).parents[1] / "agent" / "fake_ray.py"
BOOT = 20.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    runner = ProcessRunner(
        tmp_path / "containers", stop_grace=1.0, base_env={"PATH": venv_path(), "LANG": "C.UTF-8"}
    )
    with head_world(
        tmp_path,
        runner=runner,
        agent_env={"RV_RAY_COMMAND": f"{sys.executable} {FAKE_RAY}"},
        python=sys.executable,
    ) as made:
        yield made


def test_a_candidate_of_the_heads_ray_enrolls_and_says_what_it_runs(world: HeadWorld) -> None:
    rented = world.rent(world.place(slots=1))
    wait_for(lambda: world.record(rented.record_id).role is Role.WORKER, BOOT, "enrollment")
    (enrolled,) = world.ledger("enrolled")
    here = rayruntime.local()
    assert (enrolled.data["ray_version"], enrolled.data["python_version"]) == (
        here.ray,
        here.python,
    )
    assert enrolled.data["runtime_source"].startswith(sys.executable)


def test_a_head_of_another_ray_refuses_it_and_halts_its_node_type(world: HeadWorld) -> None:
    here = rayruntime.local()
    world.service.app.versions = RayVersions("2.0.0", here.python)
    rented = world.rent(world.place(slots=1))
    wait_for(lambda: rented.vast_id not in world.sim.instances, BOOT, "the self-destroy")
    (refused,) = world.ledger("ray_version_mismatch")
    reason = (
        f"image {world.spec.node_types['cpu'].image} has Ray {here.ray} (Python {here.python}), "
        f"the head runs Ray 2.0.0 (Python {here.python}): Ray refuses a worker node of another "
        "Ray version"
    )
    assert reason in refused.message
    reports = [e for e in world.ledger("worker_report") if e.instance == rented.vast_id]
    assert reports and reports[0].data["reason"] == "enroll_refused"
    assert reason in reports[0].data["detail"]
    records = world.records()
    halt = records.breakers[f"{world.spec.name}/cpu"].halt
    assert halt is not None and halt.reason == reason
    assert [a.cls for a in records.alerts] == ["ray_version_mismatch"]
