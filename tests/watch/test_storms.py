"""Bad days at vast destroy nothing healthy: a listing that misses an instance once, 429 storms in
every body shape, 5xx storms with HTML bodies, a listing that fails or comes back empty."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from fleetsim.harness import START, Fleet, fleet
from reconciler.model.records import Intent, Role
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec
from vastsim import Sim

LIST = "GET /api/v1/instances/"
SPEC = spec_yaml(
    "storm",
    """\
max_dollars_per_hour: 5
node_types:
  gpu:
    min_workers: 2
    max_workers: 2
    candidate_factor: 1
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer:
      filters: {num_gpus: {eq: 1}}
""",
)


@pytest.fixture
def steady() -> Iterator[Fleet]:
    spec = load_spec(SPEC, "storm.yaml")
    with fleet(spec) as f:
        # steady: its workers have served the breaker's min_service_seconds (the canary rule is
        # lifted), as a cluster that has run a while has
        f.run_until(START + 900)
        assert len(workers(f)) == 2
        yield f


def workers(f: Fleet) -> set[int]:
    return {
        r.vast_id
        for r in f.controller.records().instances.values()
        if r.role is Role.WORKER and r.live and r.intent is Intent.RUNNING and r.vast_id
    }


def all_at_once(sim: Sim, victim: int) -> None:
    sim.faults.hide_instance(victim, listings=1)
    sim.faults.rate_limit(LIST, 10, style="json")
    sim.faults.server_error(LIST, 10, status=502)


STORMS: dict[str, Callable[[Sim, int], None]] = {
    "missing-once": lambda sim, victim: sim.faults.hide_instance(victim, listings=1),
    "429-text": lambda sim, _: sim.faults.rate_limit(LIST, 40, style="text"),
    "429-detail": lambda sim, _: sim.faults.rate_limit(LIST, 40, style="detail"),
    "429-json-retry-after": lambda sim, _: sim.faults.rate_limit(
        LIST, 40, style="json", retry_after=5
    ),
    "500-html": lambda sim, _: sim.faults.server_error(LIST, 40, status=500),
    "503-html": lambda sim, _: sim.faults.server_error(LIST, 40, status=503),
    "page-fails": lambda sim, _: sim.faults.fail_listing(page=1, status=502, count=40),
    "empty-listing": lambda sim, _: sim.faults.empty_listing(count=3),
    "all-at-once": all_at_once,
}


@pytest.mark.parametrize("storm", list(STORMS))
def test_storm_destroys_nothing_healthy(steady: Fleet, storm: str) -> None:
    before = workers(steady)
    instances = set(steady.sim.instances)
    STORMS[storm](steady.sim, min(before))
    steady.run_until(steady.clock.now() + 900)
    assert workers(steady) == before
    assert set(steady.sim.instances) == instances
    destroys = [
        line
        for line in steady.ledger.read_text().splitlines()
        if '"kind": "call"' in line and "destroy" in line
    ]
    assert destroys == []


def test_an_account_really_emptied_is_believed(steady: Fleet) -> None:
    """Someone destroyed everything at vast's console: the empty listing is confirmed instance by
    instance, the records are closed, and the cluster is rented again."""
    before = set(steady.sim.instances)
    for vast_id in before:
        steady.client.destroy_instance(vast_id)
    steady.run_until(steady.clock.now() + 600)
    assert len(workers(steady)) == 2
    assert workers(steady).isdisjoint(before)
