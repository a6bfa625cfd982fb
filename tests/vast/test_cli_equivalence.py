"""What this client sends is accepted by vastsim the same way as what the official CLI sends.

The official `vastai` 1.9.1 CLI and this client speak to one served simulator. The CLI sends
numbers as strings, GB as MB and its own default filters; this client sends real numbers. The
simulator must find the same offers for the same search, and build the same instance from the
same create, whichever of the two asked. That holds this client to the wire format the CLI has
been captured sending to the real vast (`reference/vast-api.md` sections 4 and 5).
"""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from reconciler.model import observed
from reconciler.vast import ClientSettings, VastClient
from tests.vastcli import run_vastai
from vastsim import Market, Sim, VirtualClock, serve
from vastsim.server import Server

pytestmark = pytest.mark.contract

KEY = "equivalence-key"
IMAGE = "rayproject/ray:2.60.0-py311-cpu"
SEARCH = "POST /api/v0/bundles/"
CREATE = "PUT /api/v0/asks/{id}/"


@dataclass
class World:
    sim: Sim
    server: Server
    home: Path
    client: VastClient

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        run = run_vastai(args, url=self.server.url, key=KEY, home=self.home)
        assert run.returncode == 0, run.stderr
        return run

    def last_body(self, route: str) -> object:
        return json.loads(self.sim.requests.filter(route=route)[-1].body)


class SimTime:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.clock.now()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.sim.advance(seconds)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    sim = Sim(market=Market.default(), clock=VirtualClock(start=1_790_000_000.0), api_key=KEY)
    with serve(sim) as server:
        client = VastClient(
            http=httpx.Client(timeout=30.0),
            base_url=server.url,
            api_key=KEY,
            clock=SimTime(sim),
            settings=ClientSettings(),
            rng=random.Random(5),
            owns_http=True,
        )
        with client:
            yield World(sim, server, tmp_path_factory.mktemp("vastai-home"), client)


def test_the_same_search_finds_the_same_offers(world: World) -> None:
    run = world.cli(
        "search", "offers", "num_gpus=1 reliability>0.95 dph<1.0 cpu_ram>=16",
        "-o", "dph_total", "--limit", "12", "--storage", "20", "--raw",
    )  # fmt: skip
    cli_offers = json.loads(run.stdout)
    cli_body = world.last_body(SEARCH)

    ours = world.client.search_offers(
        observed.OfferSearch.of(
            {
                "num_gpus": {"eq": 1},
                "reliability": {"gt": 0.95},
                "dph_total": {"lt": 1.0},
                "cpu_ram": {"gte": 16_000},  # MB, as the CLI converts GB
                # the CLI's default filters
                "verified": {"eq": True},
                "external": {"eq": False},
                "rentable": {"eq": True},
            },
            limit=12,
            allocated_storage=20,
        )
    )
    our_body = world.last_body(SEARCH)

    assert cli_body != our_body  # different spellings on the wire ("1" vs 1, dph vs dph_total)
    assert len(cli_offers) > 3
    assert [o.id for o in ours] == [o["id"] for o in cli_offers]
    assert [o.dph_total for o in ours] == pytest.approx([o["dph_total"] for o in cli_offers])


@pytest.mark.parametrize("bid", [None, 0.5], ids=["on-demand", "bid"])
def test_the_same_create_builds_the_same_instance(world: World, bid: float | None) -> None:
    search = observed.OfferSearch.of({"num_gpus": {"eq": 1}, "rented": {"eq": False}}, limit=2)
    cli_offer, our_offer = world.client.search_offers(search)
    bid_flags = ["--bid_price", str(bid)] if bid is not None else []
    run = world.cli(
        "create", "instance", str(cli_offer.id), "--image", IMAGE, "--disk", "20",
        "--label", "rv.eq.abcdef12.cli", "--env", "-p 22:22 -p 6379:6379 -e RV_ROLE=candidate",
        "--onstart-cmd", "echo hi", *bid_flags, "--raw",
        "--args", "python3", "-m", "rv_boot",
    )  # fmt: skip
    cli_id = int(json.loads(run.stdout)["new_contract"])
    cli_body = world.last_body(CREATE)

    created = world.client.create_instance(
        our_offer.id,
        observed.CreateRequest(
            image=IMAGE,
            disk_gb=20,
            label="rv.eq.abcdef12.ours",
            env={"RV_ROLE": "candidate"},
            ports=(22, 6379),
            args=("python3", "-m", "rv_boot"),
            onstart="echo hi",
            bid_price=bid,
        ),
    )
    assert isinstance(cli_body, dict)
    assert cli_body["runtype"] == "args"  # the CLI took the same road

    theirs = world.sim.instances[cli_id]
    mine = world.sim.instances[created.instance_id]
    for field in ("image", "disk", "onstart", "runtype", "args", "bid_price"):
        assert getattr(mine, field) == getattr(theirs, field), field
    assert dict(mine.env) == dict(theirs.env)
    assert mine.bid_price == bid

    world.sim.advance(600)
    cli_view = world.client.show_instance(cli_id)
    our_view = world.client.show_instance(created.instance_id)
    assert cli_view is not None
    assert our_view is not None
    assert set(our_view.ports) == set(cli_view.ports) == {"22/tcp", "6379/tcp"}
    assert (our_view.actual_status, our_view.is_bid) == (cli_view.actual_status, cli_view.is_bid)
    assert world.client.destroy_instance(cli_id)
    assert world.client.destroy_instance(created.instance_id)
