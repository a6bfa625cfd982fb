"""The billing meter over a scripted virtual day: the meter equals the hand-computed sum."""

from __future__ import annotations

from fractions import Fraction

import httpx
import pytest

from vastsim import InProcessTransport, Market, ScriptedRunner, Sim, Timing, VirtualClock
from vastsim.billing import Meter

from .conftest import KEY, T0, offer_on

IMAGE = "day/image:1"
DAY = 86_400


def day_market() -> Market:
    return Market.from_dict(
        {
            "images": {IMAGE: 2.0},
            "machines": [
                {"machine_id": 1, "host_id": 1, "gpu_name": "RTX 4090", "num_gpus": 1,
                 "dph_base": 0.50, "storage_cost": 0.30, "cached_images": [IMAGE]},
                {"machine_id": 2, "host_id": 2, "gpu_name": "RTX 3090", "num_gpus": 1,
                 "dph_base": 0.20, "storage_cost": 0.10, "pull_speed_mbps": 50.0},
                {"machine_id": 3, "host_id": 3, "gpu_name": "A100 PCIE", "num_gpus": 1,
                 "dph_base": 0.40, "min_bid": 0.10, "storage_cost": 0.12,
                 "cached_images": [IMAGE]},
            ],
        }
    )  # fmt: skip


def dollars(rate_per_hour: Fraction, seconds: int) -> Fraction:
    return rate_per_hour * seconds / 3600


def test_a_day_of_rentals_stops_and_destroys_is_exact_to_the_cent() -> None:
    timing = Timing(provision=4, create=6, container_start=10, reboot=10, restart=2, stop_delay=0)
    sim = Sim(
        market=day_market(),
        clock=VirtualClock(T0),
        api_key=KEY,
        runner=ScriptedRunner(),
        timing=timing,
    )
    client = httpx.Client(
        transport=InProcessTransport(sim),
        base_url="http://v",
        headers={"Authorization": f"Bearer {KEY}"},
    )

    def at(seconds: float) -> None:
        sim.advance(T0 + seconds - sim.clock.now())

    def create(machine_id: int, disk: float, label: str, price: float | None = None) -> int:
        body = {"image": IMAGE, "disk": disk, "label": label, "price": price}
        response = client.put(f"/api/v0/asks/{offer_on(client, machine_id)}/", json=body)
        assert response.status_code == 200, response.text
        return int(response.json()["new_contract"])

    a = create(1, 100, "rv.day.a")
    b = create(2, 50, "rv.day.b")  # 2 GB pull at 50 MB/s: running at 4 + 6 + 40 + 10 = 60 s
    c = create(3, 20, "other.c", price=0.15)  # interruptible at its bid
    at(3600)
    client.put(f"/api/v0/instances/{a}/", json={"state": "stopped"})
    at(7200)
    client.put(f"/api/v0/instances/{a}/", json={"state": "running"})
    at(20_000)
    client.put(f"/api/v0/instances/reboot/{b}/", json={})
    at(30_000)
    sim.faults.outbid(c)
    at(43_200)
    client.request("DELETE", f"/api/v0/instances/{b}/")
    at(50_000)
    client.request("DELETE", f"/api/v0/instances/{c}/")
    at(80_000)
    client.request("DELETE", f"/api/v0/instances/{a}/")
    at(DAY)

    storage_a = Fraction(100) * Fraction("0.30") / 720
    storage_b = Fraction(50) * Fraction("0.10") / 720
    storage_c = Fraction(20) * Fraction("0.12") / 720
    expected_a = dollars(storage_a, 80_000) + dollars(
        Fraction("0.50"), (3600 - 20) + (80_000 - 7210)
    )
    expected_b = dollars(storage_b, 43_200) + dollars(
        Fraction("0.20"), (20_000 - 60) + (43_200 - 20_010)
    )
    expected_c = dollars(storage_c, 50_000) + dollars(Fraction("0.15"), 30_000 - 20)

    meter = sim.meter
    for instance_id, expected in ((a, expected_a), (b, expected_b), (c, expected_c)):
        assert round(meter.instance(instance_id), 2) == round(float(expected), 2)
        assert meter.instance(instance_id) == pytest.approx(float(expected), rel=1e-12)
    total = expected_a + expected_b + expected_c
    assert round(meter.total(), 2) == round(float(total), 2)
    assert meter.total() == pytest.approx(float(total), rel=1e-12)
    assert meter.label_prefix("rv.day.") == pytest.approx(float(expected_a + expected_b))
    assert meter.label_prefix("other.") == pytest.approx(float(expected_c))

    # nothing is billed after destroy
    sim.advance(DAY)
    assert meter.total() == pytest.approx(float(total), rel=1e-12)
    assert [s.status for s in meter.segments(b)] == [
        None, "created", "loading", "running", "rebooting", "running",
    ]  # fmt: skip
    client.close()
    sim.shutdown()


def test_meter_splits_segments_at_rate_changes() -> None:
    now = [0.0]
    meter = Meter(lambda: now[0])
    meter.open(1, 0.0, 1.0, "created", "rv.x")
    meter.change(1, 1800.0, 3.0, "running")
    meter.change(1, 1800.0, 3.0, "running")  # no change: no new segment
    now[0] = 3600.0
    assert meter.instance(1) == pytest.approx(0.5 + 1.5)
    meter.close(1, 3600.0)
    now[0] = 7200.0
    assert meter.instance(1) == pytest.approx(2.0)
    assert meter.rate(1) == 0.0
    assert meter.instance(1, at=1800.0) == pytest.approx(0.5)
    meter.relabel(1, "other")
    assert meter.label_prefix("rv.") == 0.0
    assert meter.label_prefix("oth") == pytest.approx(2.0)


def test_label_change_moves_the_money_to_the_new_prefix() -> None:
    with Sim(market=day_market(), clock=VirtualClock(T0), api_key=KEY) as sim:
        client = httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        )
        offer = offer_on(client, 1)
        body = {"image": IMAGE, "disk": 10, "label": "a.1"}
        instance_id = client.put(f"/api/v0/asks/{offer}/", json=body).json()["new_contract"]
        sim.advance(3600)
        client.put(f"/api/v0/instances/{instance_id}/", json={"label": "b.1"})
        assert sim.meter.label_prefix("a.") == 0.0
        assert sim.meter.label_prefix("b.") == pytest.approx(sim.meter.total())
        client.close()
