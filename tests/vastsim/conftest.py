"""Fixtures for vastsim tests: a virtual-time simulator and an httpx client that calls it
in-process, plus small helpers to rent and inspect instances through the API."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.waiting import wait_for
from vastsim import InProcessTransport, Market, ScriptedRunner, Sim, Timing, VirtualClock

KEY = "test-account-key"
ADMIN = "test-admin-key"
T0 = 1_790_000_000.0
IMAGE = "vastsim/test:latest"


def small_market() -> Market:
    """Four single-GPU machines and one 4-GPU machine; the test image is cached on all but one."""
    return Market.from_dict(
        {
            "images": {IMAGE: 2.0},
            "defaults": {"cached_images": [IMAGE], "storage_cost": 0.2, "pull_speed_mbps": 100.0},
            "machines": [
                {"machine_id": 1, "host_id": 10, "gpu_name": "RTX 4090", "num_gpus": 1,
                 "dph_base": 0.40, "min_bid": 0.20, "geolocation": "Texas, US"},
                {"machine_id": 2, "host_id": 11, "gpu_name": "RTX 3090", "num_gpus": 1,
                 "dph_base": 0.20, "min_bid": 0.10, "geolocation": "Quebec, CA"},
                {"machine_id": 3, "host_id": 12, "gpu_name": "RTX 3090", "num_gpus": 1,
                 "dph_base": 0.25, "geolocation": "Hesse, DE", "cached_images": []},
                {"machine_id": 4, "host_id": 13, "gpu_name": "A100 SXM4", "num_gpus": 4,
                 "dph_base": 1.00, "min_bid": 0.50, "geolocation": "Oregon, US"},
                {"machine_id": 5, "host_id": 14, "gpu_name": "RTX 3060", "num_gpus": 1,
                 "dph_base": 0.05, "geolocation": "Ohio, US", "disk_gb": 2000},
            ],
        }
    )  # fmt: skip


TIMING = Timing(
    provision=4.0, create=6.0, container_start=10.0, reboot=8.0, restart=2.0, stop_delay=0.0
)


@pytest.fixture
def sim() -> Iterator[Sim]:
    simulator = Sim(
        market=small_market(),
        clock=VirtualClock(start=T0),
        api_key=KEY,
        admin_key=ADMIN,
        runner=ScriptedRunner(),
        timing=TIMING,
    )
    yield simulator
    simulator.shutdown()


@pytest.fixture
def client(sim: Sim) -> Iterator[httpx.Client]:
    with httpx.Client(
        transport=InProcessTransport(sim),
        base_url="http://vastsim.test",
        headers={"Authorization": f"Bearer {KEY}"},
    ) as http:
        yield http


def offers(client: httpx.Client, **query: Any) -> list[dict[str, Any]]:
    response = client.post("/api/v0/bundles/", json=query)
    assert response.status_code == 200, response.text
    result: list[dict[str, Any]] = response.json()["offers"]
    return result


def offer_on(client: httpx.Client, machine_id: int, num_gpus: int = 1) -> int:
    """The offer id of a `num_gpus` bundle on a machine."""
    for offer in offers(client, machine_id={"eq": machine_id}):
        if offer["num_gpus"] == num_gpus:
            return int(offer["id"])
    raise AssertionError(f"no {num_gpus}-GPU offer on machine {machine_id}")


def rent(client: httpx.Client, machine_id: int = 1, **body: Any) -> dict[str, Any]:
    """Create an instance on a machine; returns the create answer."""
    payload = {"client_id": "me", "image": IMAGE, "disk": 10.0, **body}
    response = client.put(f"/api/v0/asks/{offer_on(client, machine_id)}/", json=payload)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def show(client: httpx.Client, instance_id: int) -> dict[str, Any] | None:
    response = client.get(f"/api/v0/instances/{instance_id}/", params={"owner": "me"})
    assert response.status_code == 200, response.text
    row: dict[str, Any] | None = response.json()["instances"]
    return row


def listing(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    """Every row of the v1 listing, following next_token."""
    rows: list[dict[str, Any]] = []
    query = {"select_filters": "{}", "limit": 25, **params}
    while True:
        response = client.get("/api/v1/instances/", params=query)
        assert response.status_code == 200, response.text
        data = response.json()
        rows.extend(data["instances"])
        if not data["next_token"]:
            return rows
        query["after_token"] = data["next_token"]


def _live_children() -> set[int]:
    """Non-zombie processes whose parent is this test process."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z" and fields[1] == me:
            found.add(int(entry))
    return found


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    """Every test stops the servers, threads and processes it starts."""
    threads = set(threading.enumerate())
    children = _live_children()
    yield
    wait_for(lambda: not (set(threading.enumerate()) - threads), timeout=10)
    wait_for(lambda: not (_live_children() - children), timeout=10)
