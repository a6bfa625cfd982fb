"""The market: YAML files, the default market, the seeded generator, offers and host traits."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import httpx
import pytest

from vastsim import InProcessTransport, Market, ScriptedRunner, Sim, VirtualClock
from vastsim.generate import generate_market
from vastsim.market import NoSuchAsk, bundle_sizes

from .conftest import KEY, T0, TIMING, rent, show

CPU_IMAGE = "rayproject/ray:2.60.0-py311-cpu"


def test_default_market_has_cheap_cpu_hosts_and_a_range_of_gpus() -> None:
    market = Market.default()
    cheap = [
        m
        for m in market
        if m.dph_base + 10 * m.storage_cost / 720 <= 0.30
        and CPU_IMAGE in m.cached_images
        and m.verification == "verified"
    ]
    assert len(cheap) >= 4
    assert any(m.cpu_cores >= 16 for m in cheap)
    assert len(market.gpu_names()) >= 6
    assert len({m.host_id for m in market}) >= 15
    assert len({m.geolocation[-2:] for m in market}) >= 6
    assert any(m.num_gpus >= 8 for m in market)
    prices = sorted(m.dph_base for m in market)
    assert prices[0] < 0.1
    assert prices[-1] > 1.0
    traits = [m.traits for m in market]
    assert any(t.never_boots for t in traits)
    assert any(t.oci_failure for t in traits)
    assert any(t.offline_after for t in traits)
    assert any(t.outbid_after for t in traits)
    assert any(t.ip_change_after for t in traits)


def test_market_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "market.yaml"
    path.write_text(
        """
images: {img/a: 4.0}
default_image_gb: 3.0
defaults: {storage_cost: 0.5, geolocation: "Bavaria, DE"}
machines:
  - {machine_id: 7, host_id: 70, gpu_name: L40S, num_gpus: 2, dph_base: 0.7,
     gpu_ram_gb: 48, cpu_cores: 24, cached_images: [img/a],
     traits: {offline_after: 60}}
"""
    )
    market = Market.from_yaml(path)
    machine = market.machine(7)
    assert (machine.storage_cost, machine.geolocation, machine.gpu_ram_gb) == (
        0.5,
        "Bavaria, DE",
        48,
    )
    assert machine.min_bid == pytest.approx(0.35)
    assert machine.traits.offline_after == 60
    assert market.image_size_gb("img/a") == 4.0
    assert market.image_size_gb("other") == 3.0
    assert [b.num_gpus for b in market.bundles()] == [1, 2]


@pytest.mark.parametrize(
    "text",
    [
        "machines: [{machine_id: 1, host_id: 1, gpu_name: X, num_gpus: 1, dph_base: 1, "
        "colour: red}]",
        "machines: [{machine_id: 1, host_id: 1, gpu_name: X, num_gpus: 1, dph_base: 1, "
        "traits: {explodes: true}}]",
        "hosts: []",
    ],
)
def test_market_file_typos_are_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="unknown"):
        Market.from_yaml(path)


def test_generator_is_seeded() -> None:
    one = generate_market(seed=7, machines=300)
    two = generate_market(seed=7, machines=300)
    other = generate_market(seed=8, machines=300)
    describe = [(m.machine_id, m.gpu_name, m.num_gpus, m.dph_base) for m in one]
    assert describe == [(m.machine_id, m.gpu_name, m.num_gpus, m.dph_base) for m in two]
    assert describe != [(m.machine_id, m.gpu_name, m.num_gpus, m.dph_base) for m in other]
    assert len(one.machines) == 300
    assert len({m.host_id for m in one}) < 300  # hosts hold several machines
    faulty = generate_market(seed=7, machines=300, faulty=0.2)
    broken = [m for m in faulty if m.traits != type(m.traits)()]
    assert 20 < len(broken) < 100


def test_bundle_sizes() -> None:
    assert bundle_sizes(8, 8, 1) == [1, 2, 4, 8]
    assert bundle_sizes(8, 5, 1) == [1, 2, 4]
    assert bundle_sizes(3, 3, 1) == [1, 2, 3]
    assert bundle_sizes(8, 8, 4) == [4, 8]
    assert bundle_sizes(1, 0, 1) == []


def test_offers_are_single_use() -> None:
    market = generate_market(seed=1, machines=5)
    bundle = market.bundles()[0]
    market.take(bundle.offer_id, owner=1)
    with pytest.raises(NoSuchAsk):
        market.take(bundle.offer_id, owner=2)


def trait_sim(**traits: object) -> tuple[Sim, httpx.Client]:
    market = Market.from_dict(
        {
            "machines": [
                {"machine_id": 1, "host_id": 1, "gpu_name": "RTX 4090", "num_gpus": 2,
                 "dph_base": 0.4, "min_bid": 0.1, "cached_images": ["vastsim/test:latest"],
                 "traits": traits},
            ]
        }
    )  # fmt: skip
    sim = Sim(
        market=market, clock=VirtualClock(T0), api_key=KEY, runner=ScriptedRunner(), timing=TIMING
    )
    client = httpx.Client(
        transport=InProcessTransport(sim),
        base_url="http://v",
        headers={"Authorization": f"Bearer {KEY}"},
    )
    return sim, client


def test_host_goes_offline_at_a_time() -> None:
    sim, client = trait_sim(offline_at=100)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(99)
    assert show(client, instance_id)["actual_status"] == "running"  # type: ignore[index]
    sim.advance(1)
    assert show(client, instance_id)["actual_status"] == "offline"  # type: ignore[index]
    client.close()
    sim.shutdown()


def test_host_goes_offline_after_each_rental_runs_for_a_while() -> None:
    sim, client = trait_sim(offline_after=600)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20 + 599)
    assert show(client, instance_id)["actual_status"] == "running"  # type: ignore[index]
    sim.advance(1)
    assert show(client, instance_id)["actual_status"] == "offline"  # type: ignore[index]
    client.close()
    sim.shutdown()


def test_host_ip_changes_after_a_rental_runs_for_a_while() -> None:
    sim, client = trait_sim(ip_change_after=50)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    before = show(client, instance_id)["public_ipaddr"]  # type: ignore[index]
    sim.advance(50)
    after = show(client, instance_id)["public_ipaddr"]  # type: ignore[index]
    assert after != before
    client.close()
    sim.shutdown()


def test_bids_are_outbid_at_a_time_but_on_demand_is_not() -> None:
    sim, client = trait_sim(outbid_at=1000)
    spot = rent(client, 1, price=0.2)["new_contract"]
    steady = rent(client, 1)["new_contract"]
    sim.advance(1000)
    spot_row = show(client, spot)
    assert spot_row is not None
    assert (spot_row["actual_status"], spot_row["intended_status"]) == ("stopped", "stopped")
    assert show(client, steady)["actual_status"] == "running"  # type: ignore[index]
    client.close()
    sim.shutdown()


def test_never_boots_and_oci_failure_from_the_market_file() -> None:
    for traits, stuck in (({"never_boots": True}, "loading"), ({"oci_failure": True}, "created")):
        sim, client = trait_sim(**traits)
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(7200)
        assert show(client, instance_id)["actual_status"] == stuck  # type: ignore[index]
        client.close()
        sim.shutdown()


def test_vastsim_imports_neither_reconciler_nor_agent() -> None:
    package = Path(__file__).resolve().parents[2] / "vastsim"
    allowed_third_party = {"yaml", "httpx"}
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in ("reconciler", "agent"), f"{path.name} imports {name}"
                if top not in ("vastsim", "__future__"):
                    stdlib = top in sys.stdlib_module_names
                    assert stdlib or top in allowed_third_party, f"{path.name} imports {name}"
                    assert importlib.util.find_spec(top) is not None
        if path.name != "transport.py":
            assert "import httpx" not in path.read_text(), path.name


def test_an_image_without_ray_is_the_markets_word_and_reaches_the_container(tmp_path: Path) -> None:
    """The market names the images whose `ray` cannot start (the default names one); their
    containers are told (`ContainerSpec.has_ray`), and the process runner puts a `ray` first on
    their PATH that the shell cannot find (exit 127), as such an image has."""
    from vastsim.containers.runner import ProcessRunner  # noqa: PLC0415

    market = Market.default()
    assert "example.org/ray-vast/no-ray:1" in market.images_without_ray
    with pytest.raises(ValueError, match="unknown market keys"):
        Market.from_dict({"machines": [], "images_with_no_ray": []})
    shim = ProcessRunner._without_ray(tmp_path)
    import subprocess  # noqa: PLC0415

    done = subprocess.run([str(shim / "ray"), "start"], capture_output=True, check=False)
    assert done.returncode == 127 and b"not found" in done.stderr
