"""Per-instance loopback addresses: so tests on one machine can tell one instance (a worker) from
another (a stranger), every instance can have its own 127.a.b.c, which is its `public_ipaddr`,
its container's `PUBLIC_IPADDR`, and `VASTSIM_SOURCE_IP` (what its processes bind to)."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from vastsim import InProcessTransport, ScriptedRunner, Sim, VirtualClock
from vastsim.lifecycle import LOOPBACK_ADDRESSES, SOURCE_IP_ENV, loopback_ip

from .conftest import KEY, T0, TIMING, listing, rent, show, small_market

BOOTED = 20.0  # seconds from create to running (cached image) with TIMING


def own_address(ip: str) -> bool:
    """A per-instance loopback address: in 127.0.0.0/8 but not 127.0.0.0/24 (127.0.0.1's)."""
    address = ipaddress.ip_address(ip)
    return address in ipaddress.ip_network("127.0.0.0/8") and not ip.startswith("127.0.0.")


@pytest.fixture
def loopback_sim() -> Iterator[tuple[Sim, ScriptedRunner, httpx.Client]]:
    runner = ScriptedRunner(loopback_ips=True)
    sim = Sim(
        market=small_market(), clock=VirtualClock(T0), api_key=KEY, runner=runner, timing=TIMING
    )
    with httpx.Client(
        transport=InProcessTransport(sim),
        base_url="http://vastsim.test",
        headers={"Authorization": f"Bearer {KEY}"},
    ) as http:
        yield sim, runner, http
    sim.shutdown()


def test_loopback_addresses_are_never_127_0_0_1_and_one_per_index() -> None:
    seen = {loopback_ip(i) for i in range(0, 254**2 * 3, 7)}
    assert len(seen) == len(range(0, 254**2 * 3, 7))
    for i in (0, 1, 253, 254, 254**2 - 1, 20_000_001, LOOPBACK_ADDRESSES - 1):
        ip = loopback_ip(i)
        assert own_address(ip), ip
        assert all(1 <= int(octet) <= 254 for octet in ip.split(".")[1:]), ip
    assert loopback_ip(0) == "127.1.1.1"
    assert loopback_ip(LOOPBACK_ADDRESSES) == loopback_ip(0)


def test_every_instance_has_its_own_address_in_listings_and_env(
    loopback_sim: tuple[Sim, ScriptedRunner, httpx.Client],
) -> None:
    sim, runner, http = loopback_sim
    # two rentals on the 4-GPU machine share a host, yet not an address
    ids = [int(rent(http, machine)["new_contract"]) for machine in (1, 2, 4, 4)]
    sim.advance(BOOTED)
    v1 = {int(row["id"]): row["public_ipaddr"].strip() for row in listing(http)}
    v0 = {i: show(http, i)["public_ipaddr"].strip() for i in ids}  # type: ignore[index]
    assert v1 == v0
    assert len(set(v0.values())) == len(ids)
    for instance_id in ids:
        ip = v0[instance_id]
        assert own_address(ip), ip
        assert ip == loopback_ip(instance_id)  # derived from the id
        container = runner.running(instance_id)
        assert container is not None
        assert container.env["PUBLIC_IPADDR"] == ip == container.env[SOURCE_IP_ENV]
        assert container.spec.public_ip == ip
    # offers keep the host's address from the market
    offer = http.post("/api/v0/bundles/", json={"machine_id": {"eq": 4}}).json()["offers"][0]
    assert not offer["public_ipaddr"].startswith("127.")


def test_an_ip_change_gives_another_own_address(
    loopback_sim: tuple[Sim, ScriptedRunner, httpx.Client],
) -> None:
    sim, runner, http = loopback_sim
    first, second, other = (int(rent(http, m)["new_contract"]) for m in (4, 4, 1))
    sim.advance(BOOTED)
    before = {i: show(http, i)["public_ipaddr"].strip() for i in (first, second, other)}  # type: ignore[index]
    sim.faults.change_ip(machine_id=4, new_ip="198.51.100.7")
    sim.advance(1)
    after = {i: show(http, i)["public_ipaddr"].strip() for i in (first, second, other)}  # type: ignore[index]
    for moved in (first, second):
        assert own_address(after[moved]) and after[moved] != before[moved]
    assert after[other] == before[other]  # another host: unchanged
    assert len(set(after.values()) | set(before.values())) == 5
    # the host's own address (in offers) is the one asked for
    assert sim.market.machine(4).ip == "198.51.100.7"
    # a change by instance moves it again, never back to an address in use
    sim.faults.change_ip(first)
    sim.advance(1)
    again = show(http, first)["public_ipaddr"].strip()  # type: ignore[index]
    assert own_address(again) and again not in {after[first], after[second], after[other]}
    # the container sees it at its next boot
    container = runner.running(first)
    assert container is not None and container.env["PUBLIC_IPADDR"] == before[first]
    http.put(f"/api/v0/instances/reboot/{first}/", json={})
    sim.advance(TIMING.reboot)
    container = runner.running(first)
    assert container is not None
    assert container.env["PUBLIC_IPADDR"] == again == container.env[SOURCE_IP_ENV]


def test_an_address_held_by_a_live_instance_is_never_handed_out_again(
    loopback_sim: tuple[Sim, ScriptedRunner, httpx.Client],
) -> None:
    sim, _, http = loopback_sim
    held = int(rent(http, 1)["new_contract"])
    sim.advance(BOOTED)
    fleet = sim.fleet
    # an id that maps onto the same index (ids wrap modulo 254**3) gets the next address
    twin = fleet._claim_loopback(held + LOOPBACK_ADDRESSES, 0)
    assert twin == loopback_ip(held + 1) != loopback_ip(held)
    # once the holder is destroyed, its address is free again
    http.delete(f"/api/v0/instances/{held}/")
    assert fleet._claim_loopback(held + 2 * LOOPBACK_ADDRESSES, 0) == loopback_ip(held)


def test_the_scripted_runner_keeps_the_markets_addresses_by_default(
    client: httpx.Client, sim: Sim
) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    instance_id = int(rent(client, 1)["new_contract"])
    sim.advance(BOOTED)
    row = show(client, instance_id)
    assert row is not None
    assert row["public_ipaddr"].strip() == sim.market.machine(1).ip
    container = runner.running(instance_id)
    assert container is not None
    assert container.env["PUBLIC_IPADDR"] == sim.market.machine(1).ip
    assert SOURCE_IP_ENV not in container.env


def test_a_socket_bound_to_any_127_address_reaches_127_0_0_1() -> None:
    """Linux routes all of 127.0.0.0/8 to `lo` (in a loopback-only network namespace too): a
    client bound to 127.3.4.5 connects to a server on 127.0.0.1, which sees 127.3.4.5."""
    seen: list[str] = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def accept() -> None:
            conn, peer = server.accept()
            with conn:
                seen.append(peer[0])
                conn.sendall(b"hello")

        thread = threading.Thread(target=accept)
        thread.start()
        with socket.create_connection(
            ("127.0.0.1", port), timeout=5, source_address=("127.3.4.5", 0)
        ) as client:
            assert client.getsockname()[0] == "127.3.4.5"
            assert client.recv(5) == b"hello"
        thread.join(5)
    assert seen == ["127.3.4.5"]
