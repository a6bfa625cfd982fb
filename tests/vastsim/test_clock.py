"""Clocks and time stepping."""

from __future__ import annotations

import httpx
import pytest

from tests.waiting import wait_for
from vastsim import InProcessTransport, RealClock, Sim, Timing, VirtualClock

from .conftest import KEY, rent, show, small_market


def test_virtual_clock_moves_only_forward() -> None:
    clock = VirtualClock(start=100.0)
    assert clock.now() == 100.0
    clock.sleep(5)
    clock.advance(1.5)
    assert clock.now() == 106.5
    clock.set(50.0)
    assert clock.now() == 106.5
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_advance_needs_a_virtual_clock() -> None:
    with (
        Sim(market=small_market(), clock=RealClock(), api_key=KEY) as sim,
        pytest.raises(TypeError),
    ):
        sim.advance(1)
    with (
        Sim(market=small_market(), clock=VirtualClock(), api_key=KEY) as virtual,
        pytest.raises(ValueError, match="backwards"),
    ):
        virtual.advance(-1)


def test_step_in_real_time_without_a_server() -> None:
    with (
        Sim(market=small_market(), clock=RealClock(), api_key=KEY, timing=Timing.fast()) as sim,
        httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        ) as client,
    ):
        instance_id = rent(client, 1)["new_contract"]
        wait_for(lambda: (show(client, instance_id) or {}).get("actual_status") == "running",
                 step=sim.step)  # fmt: skip


def test_instant_timing_runs_at_once() -> None:
    with (
        Sim(
            market=small_market(), clock=VirtualClock(), api_key=KEY, timing=Timing.instant()
        ) as sim,
        httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        ) as client,
    ):
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(0)
        assert show(client, instance_id)["actual_status"] == "running"  # type: ignore[index]
