"""The bootloader: it refuses an agent whose hash does not match, gives up on a head it cannot
reach, and in both cases reports (when it can) and destroys its own instance, never exiting."""

from __future__ import annotations

import dataclasses

from tests.waiting import wait_for

from .conftest import WorldFactory


def gone(world, vast_id: int) -> bool:
    return vast_id not in world.sim.instances


def self_destroyed(world, vast_id: int) -> float:
    """When the instance destroyed itself (with its own key)."""
    path = f"/api/v0/instances/{vast_id}/"
    deletes = wait_for(
        lambda: [r for r in world.sim.requests if r.method == "DELETE" and r.path == path],
        20,
        f"the self-destroy; container log:\n{world.sim.runner.logs(vast_id)}",
    )
    assert deletes[0].identity == "instance"
    assert deletes[0].client == world.sim.instance(vast_id).public_ip  # from its own address
    wait_for(lambda: world.sim.runner.pids(vast_id) == [], 10, "no process left")
    return float(world.sim.instance(vast_id).destroyed_at)


def test_an_agent_whose_hash_does_not_match_is_refused(agent_world: WorldFactory):
    world = agent_world()
    genuine = world.launcher.agent
    # the container is told to expect another agent than the one the head serves
    world.launcher.agent = dataclasses.replace(genuine, sha256="0" * 64)
    rented = world.rent(world.place(slots=1))
    destroyed_at = self_destroyed(world, rented.vast_id)
    [report] = world.ledger("worker_report")
    assert report.instance == rented.vast_id and report.time < destroyed_at
    assert report.data["reason"] == "agent_hash_mismatch"
    assert report.data["phase"] == "bootloader"
    assert genuine.sha256 in report.message  # what it got, for the person reading the ledger
    assert world.record(rented.record_id).role.value == "candidate"  # it never enrolled
    log = world.sim.runner.logs(rented.vast_id)
    assert "rv-agent" not in log  # the agent never ran
    assert world.sim.instance(rented.vast_id).boots == 1  # and PID 1 never exited


def test_a_head_it_cannot_reach_ends_the_download_after_the_give_up_time(agent_world: WorldFactory):
    world = agent_world()
    closed = dataclasses.replace(world.launcher.endpoints, enroll_port=1)  # nobody listens
    world.launcher.endpoints = closed
    rented = world.rent(world.place(slots=1))
    destroyed_at = self_destroyed(world, rented.vast_id)
    created_at = world.record(rented.record_id).created_at
    assert destroyed_at - created_at >= 3.0  # bootloader_give_up_seconds
    log = world.sim.runner.logs(rented.vast_id)
    assert "agent download failed" in log and "ending: agent_download_failed" in log
    assert "report not delivered" in log  # it tried, for report_wait_seconds
    assert world.ledger("worker_report") == []
    assert world.sim.instance(rented.vast_id).boots == 1
