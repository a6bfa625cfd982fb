"""Instance life cycles in virtual time: statuses, timings, restarts and scripted containers."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

from vastsim import (
    Behaviour,
    Container,
    ContainerSpec,
    InProcessTransport,
    ScriptedRunner,
    Sim,
    Timing,
    VirtualClock,
)
from vastsim.lifecycle import gpu_env

from .conftest import ADMIN, KEY, T0, TIMING, listing, offer_on, rent, show, small_market


def status(client: httpx.Client, instance_id: int) -> str | None:
    row = show(client, instance_id)
    assert row is not None
    value: str | None = row["actual_status"]
    return value


def test_boot_sequence_with_cached_image(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    seen = []
    for _ in range(25):
        seen.append(status(client, instance_id))
        sim.advance(1)
    assert seen[:4] == [None] * 4
    assert seen[4:10] == ["created"] * 6
    assert seen[10:20] == ["loading"] * 10
    assert seen[20:] == ["running"] * 5


def test_pull_time_from_image_size_and_pull_speed(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 3)["new_contract"]  # image not cached: 2 GB at 100 MB/s = 20 s
    sim.advance(10)
    row = show(client, instance_id)
    assert row is not None
    assert row["actual_status"] == "loading"
    assert "Pulling" in row["status_msg"]
    sim.advance(29.9)
    assert status(client, instance_id) == "loading"
    sim.advance(0.1)
    assert status(client, instance_id) == "running"
    # the host keeps the image: the next rental there starts without a pull
    client.request("DELETE", f"/api/v0/instances/{instance_id}/")
    again = rent(client, 3)["new_contract"]
    sim.advance(20)
    assert status(client, again) == "running"


def test_stop_start_and_states(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
    row = show(client, instance_id)
    assert row is not None
    assert (row["actual_status"], row["intended_status"], row["cur_state"], row["next_state"]) == (
        "stopped",
        "stopped",
        "stopped",
        "stopped",
    )
    assert "ports" not in row
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
    row = show(client, instance_id)
    assert row is not None
    assert (row["actual_status"], row["intended_status"], row["next_state"]) == (
        "loading",
        "running",
        "running",
    )
    sim.advance(10)
    assert status(client, instance_id) == "running"


@pytest.mark.parametrize("delay", [2.0, 5.0, 10.0])
def test_a_stop_lands_its_delay_after_the_call_and_the_container_runs_until_then(
    delay: float,
) -> None:
    made: list[DestroysOnTerm] = []
    holder: list[Sim] = []

    def factory(spec: ContainerSpec) -> Behaviour:
        made.append(DestroysOnTerm(holder[0]))
        return made[-1]

    timing = Timing(4.0, 6.0, 10.0, 8.0, 2.0, stop_delay=delay)
    runner = ScriptedRunner(factory, stop_grace=10.0)
    with Sim(
        market=small_market(), clock=VirtualClock(T0), api_key=KEY, runner=runner, timing=timing
    ) as sim:
        holder.append(sim)
        with httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        ) as client:
            instance_id = rent(client, 1)["new_contract"]
            sim.advance(20)
            answer = client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
            assert answer.json() == {"success": True}
            row = show(client, instance_id)
            assert row is not None
            # accepted, not carried out yet: it runs on, intended stopped
            assert (row["actual_status"], row["intended_status"]) == ("running", "stopped")
            assert made[0].term_at is None and runner.running(instance_id) is not None
            client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})  # again
            sim.advance(delay - 0.5)
            assert status(client, instance_id) == "running" and made[0].term_at is None
            sim.advance(0.5)
            assert status(client, instance_id) == "stopped"
            assert made[0].term_at == T0 + 20 + delay  # docker stop's TERM, at the delay


def test_a_start_while_a_stop_is_under_way_calls_the_stop_off() -> None:
    timing = Timing(4.0, 6.0, 10.0, 8.0, 2.0, stop_delay=5.0)
    with (
        Sim(market=small_market(), clock=VirtualClock(T0), api_key=KEY, timing=timing) as sim,
        httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        ) as client,
    ):
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(20)
        client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
        sim.advance(2)
        client.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
        sim.advance(10)
        row = show(client, instance_id)
        assert row is not None
        assert (row["actual_status"], row["intended_status"]) == ("running", "running")


def test_a_start_pulls_nothing_and_a_stopped_instance_bills_storage_only(
    client: httpx.Client, sim: Sim
) -> None:
    instance_id = rent(client, 3)["new_contract"]  # machine 3 has no cached image: a 20 s pull
    sim.advance(40)
    assert status(client, instance_id) == "running"
    inst = sim.instance(instance_id)
    assert inst is not None
    inst.machine.cache.clear()  # the host drops the image; the instance's disk still has it
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
    stopped_at = sim.clock.now()
    sim.advance(600)
    assert sim.meter.rate(instance_id) == inst.storage_dph
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
    started_at = sim.clock.now()
    row = show(client, instance_id)
    assert row is not None and row["actual_status"] == "loading"
    assert "up to date" in row["status_msg"]
    sim.advance(TIMING.container_start)  # the container starts: no pull
    assert status(client, instance_id) == "running"
    assert sim.meter.rate(instance_id) == inst.dph_total
    billed = [(s.start, s.end, s.rate, s.status) for s in sim.meter.segments(instance_id)]
    assert (stopped_at, started_at, inst.storage_dph, "stopped") in billed
    end = started_at + TIMING.container_start
    assert (started_at, end, inst.storage_dph, "loading") in billed
    assert billed[-1] == (end, None, inst.dph_total, "running")


def test_start_waits_in_scheduling_while_someone_else_has_the_gpu(
    client: httpx.Client, sim: Sim
) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
    assert sim.faults.take_gpus(1) == [0]
    client.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
    sim.advance(3600)
    assert status(client, instance_id) == "scheduling"
    sim.faults.free_gpus(1)
    assert status(client, instance_id) == "loading"
    sim.advance(10)
    assert status(client, instance_id) == "running"


def test_our_own_second_rental_can_take_a_stopped_instances_gpu(
    client: httpx.Client, sim: Sim
) -> None:
    first = rent(client, 2)["new_contract"]
    sim.advance(20)
    client.put(f"/api/v0/instances/{first}/", json={"state": "stopped"})
    second = rent(client, 2)["new_contract"]  # the freed GPU is offered again
    client.put(f"/api/v0/instances/{first}/", json={"state": "running"})
    sim.advance(60)
    assert status(client, first) == "scheduling"
    client.request("DELETE", f"/api/v0/instances/{second}/")
    sim.advance(10)
    assert status(client, first) == "running"


def test_reboot_restarts_the_container(client: httpx.Client, sim: Sim) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    assert runner.boots[instance_id] == 1
    client.put(f"/api/v0/instances/reboot/{instance_id}/", json={})
    assert status(client, instance_id) == "rebooting"
    assert runner.running(instance_id) is None
    sim.advance(8)
    assert status(client, instance_id) == "running"
    assert runner.boots[instance_id] == 2


def test_recycle_pulls_afresh(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    client.put(f"/api/v0/instances/recycle/{instance_id}/", json={})
    assert status(client, instance_id) == "recycling"
    sim.advance(6)
    assert status(client, instance_id) == "loading"
    sim.advance(29)
    assert status(client, instance_id) == "loading"  # 20 s pull + 10 s start
    sim.advance(1)
    assert status(client, instance_id) == "running"


def test_destroy_with_listing_lag() -> None:
    timing = Timing(4, 6, 10, 8, 2, destroy_list_lag=5.0, stop_delay=0.0)
    with Sim(market=small_market(), clock=VirtualClock(T0), api_key=KEY, timing=timing) as sim:
        client = httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        )
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(20)
        client.request("DELETE", f"/api/v0/instances/{instance_id}/")
        assert show(client, instance_id) is None
        (row,) = listing(client)
        assert row["id"] == instance_id
        assert row["next_state"] == "unloaded"
        assert row["intended_status"] == "stopped"
        sim.advance(5)
        assert listing(client) == []
        client.close()


class Watchdog(Behaviour):
    """Destroys its own instance through the API, with its instance key, after 60 s."""

    def __init__(self, sim: Sim, spec: ContainerSpec) -> None:
        self.sim = sim
        self.started = 0.0
        self.answers: list[int] = []

    def on_start(self, container: Container, now: float) -> None:
        self.started = now
        container.log("watchdog up")

    def next_wakeup(self, container: Container) -> float | None:
        return None if self.answers else self.started + 60

    def step(self, container: Container, now: float) -> None:
        if now < self.started + 60 or self.answers:
            return
        headers = {"Authorization": f"Bearer {container.env['CONTAINER_API_KEY']}"}
        with httpx.Client(transport=InProcessTransport(self.sim), base_url="http://v") as http:
            url = f"/api/v0/instances/{container.env['CONTAINER_ID']}/"
            self.answers.append(http.delete(url, headers=headers).status_code)


def test_scripted_container_calls_the_api_back_in_virtual_time() -> None:
    behaviours: list[Watchdog] = []
    holder: list[Sim] = []

    def factory(spec: ContainerSpec) -> Behaviour:
        behaviours.append(Watchdog(holder[0], spec))
        return behaviours[-1]

    with Sim(
        market=small_market(),
        clock=VirtualClock(T0),
        api_key=KEY,
        runner=ScriptedRunner(factory),
        timing=TIMING,
    ) as sim:
        holder.append(sim)
        client = httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        )
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(3600)
        assert [b.answers for b in behaviours] == [[200]]
        assert show(client, instance_id) is None
        # the watchdog acted exactly at running + 60 s: 80 s of life billed
        assert sim.meter.segments(instance_id)[-1].end == T0 + 80
        client.close()


def test_container_environment(client: httpx.Client, sim: Sim) -> None:
    answer = rent(client, 1, env={"MY_VAR": "hello", "-p 8080:8080": "1"}, label="rv.x")
    instance_id = answer["new_contract"]
    sim.advance(20)
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    container = runner.running(instance_id)
    assert container is not None
    env = container.env
    row = show(client, instance_id)
    assert row is not None
    assert env["CONTAINER_ID"] == str(instance_id)
    assert env["CONTAINER_API_KEY"] == answer["instance_api_key"]
    assert env["PUBLIC_IPADDR"] == row["public_ipaddr"]
    assert env["VAST_TCP_PORT_8080"] == row["ports"]["8080/tcp"][0]["HostPort"]
    assert env["VAST_TCP_PORT_22"] == row["ports"]["22/tcp"][0]["HostPort"]
    assert env["MY_VAR"] == "hello"
    assert "-p 8080:8080" not in env
    assert container.spec.label == "rv.x"


def test_the_containers_gpus_are_the_offers_and_simulated(client: httpx.Client, sim: Sim) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    one = rent(client, 1)["new_contract"]
    answer = client.put(
        f"/api/v0/asks/{offer_on(client, 4, num_gpus=2)}/",
        json={"client_id": "me", "image": "vastsim/test:latest", "disk": 10.0,
              "env": {"CUDA_VISIBLE_DEVICES": "7", "VASTSIM_GPUS": "8"}},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    two = answer.json()["new_contract"]
    sim.advance(20)
    seen = {}
    for instance_id in (one, two):
        container = runner.running(instance_id)
        assert container is not None
        row = show(client, instance_id)
        assert row is not None
        seen[row["num_gpus"]] = (
            container.env["VASTSIM_GPUS"],
            container.env["CUDA_VISIBLE_DEVICES"],
            container.env["GPU_COUNT"],
        )
    # numbered from 0 inside the container, whichever of the machine's GPUs it holds; the
    # simulator's word wins over the create's env
    assert seen == {1: ("1", "0", "1"), 2: ("2", "0,1", "2")}
    assert gpu_env(0) == {"VASTSIM_GPUS": "0"}  # no GPU, no device ids


class ExitsAfter(Behaviour):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = 0.0

    def on_start(self, container: Container, now: float) -> None:
        self.started = now

    def next_wakeup(self, container: Container) -> float | None:
        return self.started + self.seconds

    def step(self, container: Container, now: float) -> None:
        if now >= self.started + self.seconds:
            container.exit(3)


def test_pid1_exit_restarts_the_container_in_the_same_instance() -> None:
    runner = ScriptedRunner(lambda spec: ExitsAfter(100.0))
    with Sim(
        market=small_market(), clock=VirtualClock(T0), api_key=KEY, runner=runner, timing=TIMING
    ) as sim:
        client = httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        )
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(20 + 100)  # boot 1 exits at 120
        assert runner.running(instance_id) is None
        sim.advance(2)  # restart delay
        assert runner.boots[instance_id] == 2
        sim.advance(1000)  # boots at 122, 224, 326, ... (100 s up, 2 s restart)
        assert runner.boots[instance_id] == 11
        assert status(client, instance_id) == "running"
        client.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_term_int_hup_reach_pid1(client: httpx.Client, sim: Sim, sig: signal.Signals) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    assert sim.signal_from_inside(instance_id, sig) is True
    sim.advance(0)
    assert runner.running(instance_id) is None  # PID 1 exited
    sim.advance(2)
    assert runner.boots[instance_id] == 2


@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT]
)
def test_other_signals_have_no_effect(client: httpx.Client, sim: Sim, sig: signal.Signals) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    assert sim.signal_from_inside(instance_id, sig) is False
    sim.advance(600)
    assert runner.boots[instance_id] == 1
    assert runner.running(instance_id) is not None


def test_control_api_signal_and_advance(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    admin = {"X-Vastsim-Admin": ADMIN}
    assert client.post("/_sim/advance", json={"seconds": 20}, headers=admin).status_code == 200
    assert status(client, instance_id) == "running"
    answer = client.post(
        "/_sim/signal", json={"instance_id": instance_id, "signal": "KILL"}, headers=admin
    )
    assert answer.json()["delivered"] is False
    answer = client.post(
        "/_sim/signal", json={"instance_id": instance_id, "signal": "TERM"}, headers=admin
    )
    assert answer.json()["delivered"] is True
    rows = client.get("/_sim/instances", headers=admin).json()
    assert [r["id"] for r in rows] == [instance_id]
    assert client.get("/_sim/instances").status_code == 403
    meter = client.get("/_sim/meter", params={"label_prefix": ""}, headers=admin).json()
    assert meter["total"] == pytest.approx(sim.meter.total())
    assert json.loads(json.dumps(meter))["label_prefix"] == meter["total"]


class DestroysOnTerm(Behaviour):
    """A PID 1 that answers docker stop's TERM by destroying its own instance 3 s later."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.term_at: float | None = None
        self.steps: list[float] = []

    def on_stop(self, container: Container, now: float) -> None:
        self.term_at = now

    def next_wakeup(self, container: Container) -> float | None:
        return None if self.term_at is None else self.term_at + 3

    def step(self, container: Container, now: float) -> None:
        self.steps.append(now)
        if self.term_at is not None and now >= self.term_at + 3:
            headers = {"Authorization": f"Bearer {container.env['CONTAINER_API_KEY']}"}
            with httpx.Client(transport=InProcessTransport(self.sim), base_url="http://v") as http:
                http.delete(f"/api/v0/instances/{container.env['CONTAINER_ID']}/", headers=headers)


@pytest.mark.parametrize(("grace", "destroyed"), [(10.0, True), (2.0, False), (0.0, False)])
def test_a_stopped_scripted_container_runs_through_docker_stops_grace(
    grace: float, destroyed: bool
) -> None:
    holder: list[Sim] = []
    made: list[DestroysOnTerm] = []

    def factory(spec: ContainerSpec) -> Behaviour:
        made.append(DestroysOnTerm(holder[0]))
        return made[-1]

    runner = ScriptedRunner(factory, stop_grace=grace)
    with Sim(
        market=small_market(), clock=VirtualClock(T0), api_key=KEY, runner=runner, timing=TIMING
    ) as sim:
        holder.append(sim)
        client = httpx.Client(
            transport=InProcessTransport(sim),
            base_url="http://v",
            headers={"Authorization": f"Bearer {KEY}"},
        )
        instance_id = rent(client, 1)["new_contract"]
        sim.advance(20)
        client.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
        assert made[0].term_at == T0 + 20 and runner.running(instance_id) is None
        sim.advance(60)
        # KILLed at the end of the grace: a grace shorter than 3 s never sees its own destroy
        assert (show(client, instance_id) is None) is destroyed
        after = [t for t in made[0].steps if t > T0 + 20]
        assert all(t < T0 + 20 + grace for t in after) and (after != []) is (grace > 3)
        client.close()
