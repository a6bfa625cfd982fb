"""Contract tests: the official `vastai` 1.9.1 CLI against a served vastsim.

The CLI exits 0 even after HTTP errors, so every test reads its output. One served simulator is
shared by the module; it runs vast's per-endpoint rate limits, on a virtual clock that each CLI
call moves 10 s ahead first (so windows pass and life cycles advance only when a test says so).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vastcli import run_vastai
from vastsim import Market, ScriptedRunner, Sim, VirtualClock, serve
from vastsim.server import Server

from .conftest import TIMING

pytestmark = pytest.mark.contract

KEY = "contract-key"
IMAGE = "rayproject/ray:2.60.0-py311-cpu"
SHOW = "GET /api/v0/instances/{id}/"
CREATE = "PUT /api/v0/asks/{id}/"


@dataclass
class World:
    sim: Sim
    server: Server
    home: Path
    http: httpx.Client

    def cli(self, *args: str, key: str = KEY) -> subprocess.CompletedProcess[str]:
        self.sim.advance(10)
        return run_vastai(args, url=self.server.url, key=key, home=self.home, wide=True)

    def offer(self, machine_id: int) -> int:
        """A 1-GPU offer on the machine (searched over HTTP, outside the search window)."""
        self.sim.advance(10)
        found = self.http.post("/api/v0/bundles/", json={"machine_id": {"eq": machine_id}})
        assert found.status_code == 200, found.text
        return int(next(o["id"] for o in found.json()["offers"] if o["num_gpus"] == 1))

    def rent(self, machine_id: int, **body: Any) -> int:
        """Create an instance over HTTP and let it reach running."""
        offer = self.offer(machine_id)
        self.sim.advance(10)
        payload = {"image": IMAGE, "disk": 10, **body}
        answer = self.http.put(f"/api/v0/asks/{offer}/", json=payload)
        assert answer.status_code == 200, answer.text
        self.sim.advance(30)
        return int(answer.json()["new_contract"])

    def status(self, instance_id: int) -> str | None:
        inst = self.sim.instance(instance_id)
        assert inst is not None
        return None if inst.destroyed_at is not None else inst.actual_status


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    sim = Sim(
        market=Market.default(),
        clock=VirtualClock(start=time.time()),
        api_key=KEY,
        runner=ScriptedRunner(),
        timing=TIMING,
        rate_limits=True,
    )
    with (
        serve(sim) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        yield World(sim, server, tmp_path_factory.mktemp("vastai-home"), http)
    assert sim.instances == {}


def test_search_offers_with_filters_and_order(world: World) -> None:
    query = "num_gpus=1 gpu_name=RTX_4090 geolocation in [US,CA] reliability>0.98 dph<1.0"
    run = world.cli(
        "search", "offers", query, "-o", "dph_total,reliability-", "--limit", "5", "--raw"
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    expected = sorted(
        (
            m
            for m in world.sim.market
            if m.gpu_name == "RTX 4090"
            and m.geolocation[-2:] in ("US", "CA")
            and m.reliability > 0.98
            and m.verification == "verified"
            and m.dph_base + 5.0 * m.storage_cost / 720 < 1.0
            and m.free_gpus()
        ),
        key=lambda m: (m.dph_base + 5.0 * m.storage_cost / 720, -m.reliability),
    )
    assert [o["machine_id"] for o in found] == [m.machine_id for m in expected][:5]
    assert all(o["num_gpus"] == 1 for o in found)
    sent = json.loads(world.sim.requests.filter(route="POST /api/v0/bundles/")[-1].body)
    assert sent["gpu_name"] == {"eq": "RTX 4090"}
    assert sent["num_gpus"] == {"eq": "1"}  # the CLI sends numbers as strings
    assert sent["order"] == [["dph_total", "asc"], ["reliability", "desc"]]


def test_create_instance_with_label_env_and_onstart(world: World) -> None:
    offer = world.offer(11002)
    run = world.cli(
        "create", "instance", str(offer), "--image", IMAGE, "--disk", "20",
        "--label", "rv.contract.1", "--env", "-e TZ=UTC -p 8080:8080",
        "--onstart-cmd", "echo hi", "--ssh", "--direct", "--raw",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["success"] is True
    inst = world.sim.instances[answer["new_contract"]]
    assert inst.label == "rv.contract.1"
    assert inst.env == [("TZ", "UTC"), ("-p 8080:8080", "1")]
    assert inst.onstart == "echo hi"
    assert inst.runtype == "ssh_direc ssh_proxy"
    assert inst.disk == 20.0
    world.sim.advance(30)
    assert world.status(inst.id) == "running"
    assert set(inst.ports) == {"22/tcp", "8080/tcp"}


def test_create_instance_with_args(world: World) -> None:
    offer = world.offer(11003)
    run = world.cli(
        "create", "instance", str(offer), "--image", IMAGE, "--raw",
        "--args", "python3", "-c", "print(1)",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    inst = world.sim.instances[json.loads(run.stdout)["new_contract"]]
    assert inst.runtype == "args"
    assert inst.args == ["python3", "-c", "print(1)"]


def test_show_instances_raw(world: World) -> None:
    a = world.rent(11001, label="rv.contract.a")
    b = world.rent(11004, label="rv.contract.b")
    run = world.cli("show", "instances", "--raw")
    assert run.returncode == 0, run.stderr
    rows = {row["id"]: row for row in json.loads(run.stdout)}
    assert {a, b} <= set(rows)
    assert rows[a]["actual_status"] == "running"
    assert rows[a]["label"] == "rv.contract.a"
    assert isinstance(rows[a]["extra_env"], dict)  # the CLI turned the pairs into a dict
    assert not rows[a]["public_ipaddr"].endswith("\n")  # ... and stripped the strings


def test_show_instance_retries_through_429s(world: World) -> None:
    instance_id = world.rent(11005)
    world.sim.faults.rate_limit(SHOW, count=2)
    before = len(world.sim.requests.filter(route=SHOW))
    run = world.cli("show", "instance", str(instance_id))
    assert run.returncode == 0, run.stderr
    assert str(instance_id) in run.stdout
    assert "running" in run.stdout
    attempts = world.sim.requests.filter(route=SHOW)[before:]
    assert [r.status for r in attempts] == [429, 429, 200]


def test_label_instance(world: World) -> None:
    instance_id = world.rent(11006)
    run = world.cli("label", "instance", str(instance_id), "rv.contract.renamed")
    assert run.stdout.strip() == f"label for {instance_id} set to rv.contract.renamed."
    assert world.sim.instances[instance_id].label == "rv.contract.renamed"


def test_stop_and_start_instance(world: World) -> None:
    instance_id = world.rent(12001)
    run = world.cli("stop", "instance", str(instance_id))
    assert run.stdout.strip() == f"stopping instance {instance_id}."
    assert world.status(instance_id) == "stopped"
    run = world.cli("start", "instance", str(instance_id))
    assert run.stdout.strip() == f"starting instance {instance_id}."
    world.sim.advance(60)
    assert world.status(instance_id) == "running"


def test_reboot_instance(world: World) -> None:
    instance_id = world.rent(12002)
    run = world.cli("reboot", "instance", str(instance_id))
    assert run.stdout.strip() == f"Rebooting instance {instance_id}."
    assert world.status(instance_id) == "rebooting"
    runner = world.sim.runner
    assert isinstance(runner, ScriptedRunner)
    world.sim.advance(8)
    assert runner.boots[instance_id] == 2


def test_destroy_instance(world: World) -> None:
    instance_id = world.rent(12101)
    run = world.cli("destroy", "instance", str(instance_id), "-y")
    assert run.stdout.strip() == f"destroying instance {instance_id}."
    assert world.status(instance_id) is None
    again = world.cli("destroy", "instance", str(instance_id), "-y")
    assert "Failed with error 404: Instance with that ID does not exist." in again.stderr
    world.sim.shutdown()  # the rest of the module's instances


def test_bad_key(world: World) -> None:
    run = world.cli("show", "instances", "--raw", key="not-the-key")
    assert run.returncode == 0
    error = json.loads(run.stderr.strip().splitlines()[-1])
    assert error == {"error": True, "status_code": 401, "msg": "Invalid user key"}
