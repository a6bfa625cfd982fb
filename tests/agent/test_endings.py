"""Every ending of the seed's table that a candidate or worker acts on, for real.

Each test rents through the head's launcher at a served vastsim whose containers are process
groups running the real bootloader and agent (as PID 1 of their container) with a fake `ray`, and
shows: the reason reaches the head (ledger) BEFORE the instance is destroyed, the destroy is the
container's own (its instance key), and nothing of the container is left running.

    no heartbeat success for worker_gives_up_after_seconds   test_heartbeats_blocked_on_the_head
    a 403 answer to a heartbeat                              test_a_refused_heartbeat
    a 403 answer to /enroll                                  test_a_refused_enrollment
    no enrollment within candidate_self_destroy_seconds      test_no_enrollment_in_time
    Ray on the worker exits                                  test_ray_exits
    TERM, INT or HUP to PID 1                                test_an_ending_signal_to_pid_1
    an error in the bootstrap                                test_an_error_in_the_bootstrap
    a container restart (second enrollment refused)          test_a_container_restart
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reconciler.head import decisions
from reconciler.model.records import Phase, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.state.ledger import LedgerEntry
from tests.waiting import wait_for

from ..head.harness import KEY, HeadWorld, Rented
from .conftest import WorldFactory
from .test_stdlib_only import interpreters

BOOT = 20.0  # seconds for a container to boot, fetch the agent and enroll (it takes about 1)


def container_log(world: HeadWorld, rented: Rented) -> str:
    return world.sim.runner.logs(rented.vast_id)


def workspace(world: HeadWorld, rented: Rented) -> Path:
    return world.sim.runner.workspace(rented.vast_id)  # type: ignore[attr-defined, no-any-return]


def started_ray(world: HeadWorld, rented: Rented) -> dict[str, Any]:
    path = workspace(world, rented) / "ray-started.json"
    return wait_for(lambda: path.exists() and json.loads(path.read_text()), BOOT, "Ray started")


def enrolled(world: HeadWorld) -> Rented:
    rented = world.rent(world.place(slots=1))
    wait_for(
        lambda: world.record(rented.record_id).role is Role.WORKER,
        BOOT,
        f"enrollment; container log:\n{container_log(world, rented)}",
    )
    return rented


def serving(world: HeadWorld) -> Rented:
    """A worker whose Ray runs and whose heartbeats the head has taken."""
    rented = enrolled(world)
    started_ray(world, rented)
    wait_for(lambda: world.record(rented.record_id).phase is Phase.SERVING, BOOT, "serving")
    return rented


def ended(world: HeadWorld, rented: Rented, reason: str, timeout: float = 20.0) -> LedgerEntry:
    """The instance is gone; the container's report of `reason` reached the head first."""
    wait_for(
        lambda: rented.vast_id not in world.sim.instances,
        timeout,
        f"the self-destroy; container log:\n{container_log(world, rented)}",
    )
    destroyed_at = world.sim.instance(rented.vast_id).destroyed_at  # type: ignore[union-attr]
    reports = [e for e in world.ledger("worker_report") if e.instance == rented.vast_id]
    assert reports, container_log(world, rented)
    report = reports[-1]
    assert report.data["reason"] == reason, report
    assert report.data["trusted"] is True
    assert report.time < destroyed_at, "the report must reach the head before the destroy"
    path = f"/api/v0/instances/{rented.vast_id}/"
    # vastsim logs a request once its containers are gone, a moment after the instance is
    deletes = wait_for(
        lambda: [r for r in world.sim.requests if r.method == "DELETE" and r.path == path],
        10,
        "the DELETE in vastsim's request log",
    )
    assert deletes[0].identity == "instance"  # its own key, not the account's
    inst = world.sim.instance(rented.vast_id)
    assert inst is not None and deletes[0].client == inst.public_ip  # from its own address
    wait_for(lambda: world.sim.runner.pids(rented.vast_id) == [], 10, "no process left")  # type: ignore[attr-defined]
    assert world.ledger("bad_agent_message") == []
    assert KEY not in container_log(world, rented)  # the account key never reached the worker
    return report


def test_heartbeats_blocked_on_the_head(agent_world: WorldFactory):
    world = agent_world()
    rented = serving(world)
    world.service.stop_heartbeats()
    blocked = time.time()
    report = ended(world, rented, "no_heartbeat_success")
    assert report.data["phase"] == "worker"
    assert report.time - blocked >= 2.0  # gives up after 3 s without a success, not before
    assert (workspace(world, rented) / "ray-stopped").exists()  # Ray stopped before the destroy


def test_a_refused_heartbeat(agent_world: WorldFactory):
    world = agent_world()
    rented = serving(world)
    # the head ended the worker's record (its went-silent net, say): it is no worker here now
    world.change(
        lambda r: decisions.put(
            r, decisions.doomed(r.instances[rented.record_id], "went_silent", time.time())
        )
    )
    report = ended(world, rented, "heartbeat_refused")
    assert "unknown_worker" in report.message
    assert [e.data["refused"] for e in world.ledger("heartbeat_refused")][:1] == ["unknown_worker"]


def test_a_refused_enrollment(agent_world: WorldFactory):
    world = agent_world()
    request = world.place(slots=1)
    world.change(
        lambda r: replace(
            r,
            requests={request: replace(r.requests[request], status=RequestStatus.FILLED)},
        )
    )
    rented = world.rent(request)
    report = ended(world, rented, "enroll_refused")
    assert report.data["phase"] == "candidate" and "late_candidate" in report.message
    assert [e.record for e in world.ledger("late_candidate")] == [rented.record_id]


def test_no_enrollment_in_time(agent_world: WorldFactory):
    world = agent_world()
    world.service.app.accepting_enrollments = False  # the head answers, but only "not yet"
    rented = world.rent(world.place(slots=1))
    report = ended(world, rented, "no_enrollment")
    assert report.data["phase"] == "candidate" and "not_ready" in report.message
    assert world.record(rented.record_id).role is Role.CANDIDATE


def test_ray_exits(agent_world: WorldFactory):
    world = agent_world()
    rented = serving(world)
    ray = started_ray(world, rented)
    container = world.sim.instance(rented.vast_id)
    assert container is not None
    ports = dict(container.ports)

    # Ray was started as the enrollment answer said, with the real core count
    argv = ray["argv"]
    assert argv[:2] == ["start", "--block"]
    flags = dict(a.split("=", 1) for a in argv[2:] if "=" in a)
    assert flags["--address"] == "127.0.0.1:6390"
    # the node advertises the instance's own loopback address (PUBLIC_IPADDR, VASTSIM_SOURCE_IP)
    assert flags["--node-ip-address"] == container.public_ip != "127.0.0.1"
    assert flags["--node-manager-port"] == str(ports["70000/tcp"])
    assert flags["--object-manager-port"] == str(ports["70001/tcp"])
    worker_ports = [int(p) for p in flags["--worker-port-list"].split(",")]
    assert worker_ports == [ports[f"{p}/tcp"] for p in range(70002, 70018)]
    assert int(flags["--num-cpus"]) == min(len(os.sched_getaffinity(0)), os.cpu_count() or 1)
    assert json.loads(flags["--resources"]) == {
        "special": 2,
        f"rv-slot-{world.record(rented.record_id).slot_id}": 1,
    }
    assert f"rv_record={rented.record_id}" in flags["--labels"].split(",")
    env = ray["env"]
    assert env["RAY_CLOUD_INSTANCE_ID"] == str(rented.vast_id)
    assert env["RAY_AUTH_MODE"] == "token" and "RAY_AUTH_TOKEN" not in env
    assert ray["token"] == world.pki.ray_auth_token and ray["token_mode"] == 0o600
    assert not {"CONTAINER_API_KEY", "RV_JOIN_TOKEN", "RV_CA_PEM"} & set(env)

    (workspace(world, rented) / "ray-exit").write_text("7")
    report = ended(world, rented, "ray_exited")
    assert "code 7" in report.message


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_an_ending_signal_to_pid_1(agent_world: WorldFactory, sig: signal.Signals):
    world = agent_world()
    rented = serving(world)
    sent = time.time()
    assert world.sim.signal_from_inside(rented.vast_id, sig) is True
    report = ended(world, rented, "signal")
    assert f"{sig.name} to PID 1" in report.message
    # the live test: the report 0.5 s after the signal, the instance gone within 3.3 s
    assert report.time - sent < 2.0
    assert world.sim.instance(rented.vast_id).destroyed_at - sent < 3.3  # type: ignore[union-attr]
    assert (workspace(world, rented) / "ray-stopped").exists()


def test_kill_quit_usr1_usr2_cont_to_pid_1_have_no_effect(agent_world: WorldFactory):
    world = agent_world()
    rented = serving(world)
    pid = world.sim.runner.pid(rented.vast_id)  # type: ignore[attr-defined]
    for sig in (signal.SIGKILL, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        assert world.sim.signal_from_inside(rented.vast_id, sig) is False
    # and even delivered straight to the agent, the ones it can catch change nothing
    for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        os.kill(pid, sig)
    heard = world.record(rented.record_id).self_report_at
    wait_for(lambda: world.record(rented.record_id).self_report_at > heard + 1.5, 10, "beats")
    assert rented.vast_id in world.sim.instances
    assert world.sim.runner.pid(rented.vast_id) == pid  # type: ignore[attr-defined]
    assert world.ledger("worker_report") == []


def test_an_error_in_the_bootstrap(agent_world: WorldFactory):
    world = agent_world(agent_env={"RV_RAY_COMMAND": "/nonexistent/ray"})
    rented = enrolled(world)
    report = ended(world, rented, "bootstrap_error")
    assert "/nonexistent/ray" in report.message and report.data["phase"] == "worker"


def test_a_container_restart(agent_world: WorldFactory):
    world = agent_world()
    rented = serving(world)
    pid = world.sim.runner.pid(rented.vast_id)  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGKILL)  # PID 1 dies (an OOM kill, a crash): vast starts it again
    report = ended(world, rented, "second_enrollment")
    assert world.sim.instance(rented.vast_id).boots == 2  # type: ignore[union-attr]
    [refusal] = world.ledger("second_enrollment")
    assert refusal.instance == rented.vast_id and refusal.time < report.time
    # the live test: gone 0.7 s after the refusal at most (here: a report, then the destroy)
    assert world.sim.instance(rented.vast_id).destroyed_at - refusal.time < 2.0  # type: ignore[union-attr]
    assert refusal.data["boot_id"] == report.data["boot_id"]


@pytest.mark.parametrize("python", interpreters()[:1] or [pytest.param("", marks=pytest.mark.skip)])
def test_the_oldest_python_ray_supports_runs_the_whole_life(agent_world: WorldFactory, python):
    world = agent_world(python=python)
    rented = serving(world)
    version = python.rsplit("python", 1)[-1]
    assert f"on Python {version}." in container_log(world, rented)
    assert world.sim.signal_from_inside(rented.vast_id, signal.SIGTERM) is True
    ended(world, rented, "signal")
