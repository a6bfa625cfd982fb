"""The virtual-time harness runs the real agent's machine against the real heads: every failure
is injected at the container's boundary, and what follows is the agent's own doing.

Each case builds a small fleet (`fleetsim.harness.fleet`), lets a worker enroll through its
cluster's `HeadApp`, injects one `ContainerFault` (or a vast stop, or a signal) and reads the
outcome where it is kept: the head's ledger (the worker's report), vastsim (who destroyed the
instance, with which key, when) and the agent itself (`Fleet.agent`).
"""

from __future__ import annotations

import itertools
import json
import signal
from collections.abc import Iterator

import pytest

from fleetsim.agents import ContainerFault, Image, Span
from fleetsim.harness import START, Fleet, fleet
from reconciler.model.records import Intent, Role
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec

SPEC = """\
max_dollars_per_hour: 5
node_types:
  gpu:
    min_workers: {workers}
    max_workers: {workers}
    candidate_factor: 1
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer:
      filters: {{num_gpus: {{eq: 1}}}}
"""


def spec(name: str = "a", workers: int = 1) -> ClusterSpec:
    return load_spec(spec_yaml(name, SPEC.format(workers=workers)), f"{name}.yaml")


@pytest.fixture
def one() -> Iterator[Fleet]:
    with fleet(spec()) as f:
        f.run_until(START + 120)
        yield f


def worker(f: Fleet, cluster: str = "a") -> int:
    (vast_id,) = [
        r.vast_id
        for r in f.controller.records().instances.values()
        if r.cluster == cluster and r.role is Role.WORKER and r.live and r.vast_id
    ]
    return vast_id


def ledger(f: Fleet) -> list[dict[str, object]]:
    return [json.loads(line) for line in f.ledger.read_text().splitlines()]


def reports(f: Fleet, vast_id: int) -> list[dict[str, object]]:
    return [
        e
        for e in ledger(f)
        if e["instance"] == vast_id and e["class"] == "worker_report" and e["kind"] == "detection"
    ]


def self_destroyed(f: Fleet, vast_id: int, reason: str) -> dict[str, object]:
    """Its report reached the head (trusted) before vast destroyed it with its own key."""
    (report,) = reports(f, vast_id)
    data = report["data"]
    assert isinstance(data, dict)
    assert (data["reason"], data["trusted"]) == (reason, True)
    inst = f.sim.instance(vast_id)
    assert inst is not None and inst.destroyed_at is not None
    assert float(report["time"]) <= inst.destroyed_at  # type: ignore[arg-type]
    path = f"/api/v0/instances/{vast_id}/"
    deletes = [r for r in f.sim.requests if r.method == "DELETE" and r.path == path]
    assert deletes and deletes[0].identity == "instance"
    return report


def test_a_healthy_worker_enrolls_at_its_head_and_heartbeats_every_30_seconds(one: Fleet) -> None:
    vast_id = worker(one)
    agent = one.agent(vast_id)
    assert agent is not None and agent.phase == "worker" and agent.enrolled_at is not None
    times = [at for at, status in agent.beats if status == 200]
    assert [round(b - a) for a, b in itertools.pairwise(times)] == [30] * (len(times) - 1)
    record = one.controller.records().instances[agent.state.record_id]  # type: ignore[union-attr]
    assert record.phase.value == "serving" and record.sample_busy is True
    env = one.sim.runner.running(vast_id).env  # type: ignore[attr-defined]
    assert env["RV_JOIN_TOKEN"] and "harness-api-key" not in json.dumps(dict(env))


def test_two_clusters_in_one_fleet_each_enroll_at_their_own_head() -> None:
    with fleet([spec("a"), spec("b", workers=2)]) as f:
        f.run_until(START + 120)
        assert set(f.heads) == {"a", "b"}
        assert f.heads["a"].endpoints.enroll_port != f.heads["b"].endpoints.enroll_port
        enrolled = [e for e in ledger(f) if e["class"] == "enrolled" and e["kind"] == "decision"]
        assert sorted(str(e["cluster"]) for e in enrolled) == ["a", "b", "b"]
        for vast_id in (worker(f, "a"),):
            agent = f.agent(vast_id)
            assert agent is not None and agent.spec.env["RV_CLUSTER"] == "a"


def test_ray_exiting_ends_the_worker_by_its_own_hand(one: Fleet) -> None:
    vast_id = worker(one)
    one.faults[vast_id] = ContainerFault(ray_exits_at=one.clock.now() + 7, ray_exit_code=3)
    one.run_until(one.clock.now() + 60)
    report = self_destroyed(one, vast_id, "ray_exited")
    assert "code 3" in str(report["message"])


def test_blocked_heartbeats_end_the_worker_300s_after_its_last_success(one: Fleet) -> None:
    vast_id = worker(one)
    one.faults[vast_id] = ContainerFault(heartbeats_blocked=Span(one.clock.now()))
    agent = one.agent(vast_id)
    assert agent is not None
    last = agent.last_heartbeat_success
    one.run_until(one.clock.now() + 400)
    report = self_destroyed(one, vast_id, "no_heartbeat_success")
    assert last is not None and float(report["time"]) == last + 300  # type: ignore[arg-type]


def test_a_vast_stop_is_a_term_the_agent_answers_by_reporting_and_destroying_itself(
    one: Fleet,
) -> None:
    vast_id = worker(one)
    stopped = one.clock.now()
    one.client.stop_instance(vast_id)
    one.run_until(stopped + 30)
    report = self_destroyed(one, vast_id, "signal")
    assert "SIGTERM to PID 1" in str(report["message"])
    inst = one.sim.instance(vast_id)
    assert inst is not None and inst.destroyed_at is not None
    assert inst.destroyed_at - stopped <= 10  # inside docker stop's grace


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_term_int_hup_from_inside_end_the_worker(one: Fleet, sig: signal.Signals) -> None:
    vast_id = worker(one)
    assert one.sim.signal_from_inside(vast_id, sig) is True
    one.run_until(one.clock.now() + 15)
    assert f"{sig.name} to PID 1" in str(self_destroyed(one, vast_id, "signal")["message"])


def test_other_signals_change_nothing(one: Fleet) -> None:
    vast_id = worker(one)
    for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGKILL):
        assert one.sim.signal_from_inside(vast_id, sig) is False
    one.run_until(one.clock.now() + 300)
    assert vast_id in one.sim.instances and reports(one, vast_id) == []


def test_a_crashed_pid_1_restarts_and_its_second_enrollment_is_refused(one: Fleet) -> None:
    vast_id = worker(one)
    one.faults[vast_id] = ContainerFault(pid1_killed_at=one.clock.now() + 1)
    one.run_until(one.clock.now() + 60)
    report = self_destroyed(one, vast_id, "second_enrollment")
    assert len(one.agents.boots[vast_id]) == 2
    refused = [e for e in ledger(one) if e["class"] == "second_enrollment"]
    assert [e["instance"] for e in refused] == [vast_id]
    assert float(refused[0]["time"]) <= float(report["time"])  # type: ignore[arg-type]


def test_without_ray_the_worker_ends_with_an_error_in_the_bootstrap() -> None:
    with fleet(spec(), faults=lambda vast_id: ContainerFault(image=Image.NO_RAY)) as f:
        f.run_until(START + 60)
        vast_id = min(f.agents.boots)  # (its replacement fails the same way)
        report = self_destroyed(f, vast_id, "bootstrap_error")
        assert "cannot start Ray" in str(report["message"])


@pytest.mark.parametrize("image", [Image.NO_PYTHON, Image.IDLES])
def test_an_image_that_never_runs_the_agent_is_ended_by_the_enrollment_limit(
    image: Image,
) -> None:
    with fleet(spec(), faults=lambda vast_id: ContainerFault(image=image)) as f:
        f.run_until(START + 150)
        first = min(f.agents.boots)
        assert reports(f, first) == []
        classes = {e["class"] for e in ledger(f) if e["instance"] == first}
        assert "enrollment_timeout" in classes and first not in f.sim.instances
        if image is Image.NO_PYTHON:
            assert len(f.agents.boots[first]) > 3  # vast restarts a PID 1 that exits, again


def test_a_head_unreachable_from_a_candidate_leaves_it_to_the_heads_limit() -> None:
    down = ContainerFault(head_unreachable=Span())
    with fleet(spec(), faults=lambda vast_id: down) as f:
        f.run_until(START + 150)
        first = min(f.agents.boots)
        agent = f.agent(first)
        assert agent is not None and agent.enrolled_at is None
        assert "connection timed out" in agent.state.last_problem  # type: ignore[union-attr]
        assert "enrollment_timeout" in {e["class"] for e in ledger(f) if e["instance"] == first}


def test_the_self_destroy_is_retried_every_5_seconds_until_vast_answers(one: Fleet) -> None:
    vast_id = worker(one)
    now = one.clock.now()
    one.faults[vast_id] = ContainerFault(vast_unreachable=Span(now, now + 17))
    one.sim.signal_from_inside(vast_id, signal.SIGTERM)
    one.run_until(now + 60)
    agent = one.agent(vast_id)
    assert agent is not None
    tries = [(round(at - now, 1), ok) for at, ok, _ in agent.destroys]
    assert tries == [(0.0, False), (5.0, False), (10.0, False), (15.0, False), (20.0, True)]
    self_destroyed(one, vast_id, "signal")


def test_an_idle_node_shows_no_traffic_and_the_money_chain_starts() -> None:
    with fleet(spec(), working=lambda now: now < START + 300) as f:
        f.run_until(START + 270)
        vast_id = worker(f)
        agent = f.agent(vast_id)
        assert agent is not None
        record = f.controller.records().instances[agent.state.record_id]  # type: ignore[union-attr]
        assert record.sample_busy is True and record.stop_due_at is None
        f.run_until(START + 400)
        record = f.controller.records().instances[record.id]
        assert record.sample_busy is False and record.stop_due_at is not None
        assert record.intent is Intent.RUNNING
