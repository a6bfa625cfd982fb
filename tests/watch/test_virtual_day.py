"""A whole virtual day of one cluster: each way a machine dies, an idle period, and no false ends.

The real controller (planner, nets, money chain, executor, ledger) and the real head
(`HeadApp`) run against an in-process vastsim on virtual time, and every container of ours runs
the agent's own state machine (`fleetsim.harness`); failures are injected at the container's
boundary or by vastsim. The day, in virtual hours:

- 0h: Ray wants 2 workers. The cheapest machine never boots: provisioning stalls, and the
  provisioning deadline (fixed when the request was placed) ends it.
- the next machine rented after that runs an image whose PID 1 never starts the agent (it never
  enrolls).
- 3h: a worker's container loses its network while its instance keeps running (no heartbeat, no
  report, no self-destroy gets out): only the went-silent net sees it.
- 4h: Ray exits on a worker: its agent reports `ray_exited` and destroys its own instance.
- 5h: a worker's host drops off the network: it is marked lost first (never destroyed for that),
  and ended when its own report has been silent past the went-silent threshold.
- 7h: an instance with our label but no record appears at vast: the orphan sweep ends it.
- 9h: the demand stops: the idle workers are stopped first (the money chain's reversible step).
  A vast stop is TERM to PID 1, and the agent reports `signal` first, as for every TERM; the
  head's answer says the stop was its own ("deliberate stop", DESIGN.md 10), so the agent keeps
  its disk and PID 1 exits within docker's stop grace: vast bills storage only. No demand comes
  back, and at the destroy timer the chain destroys them.

Each failed machine must be ended by the expected net (or by its own agent) within its window;
healthy ones only after the demand stopped; the ledger must tell each story.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fleetsim.agents import ContainerFault, Image
from fleetsim.harness import START, Fleet, fleet
from reconciler.applying.search import offer_search
from reconciler.model.labels import label_for
from reconciler.model.observed import CreateRequest
from reconciler.model.records import Intent, Phase, Role
from reconciler.model.spec import ClusterSpec
from reconciler.planning.offers import unfit_reason
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec

H = 3600.0
DOCKER_GRACE = 10.0  # docker stop's grace: the agent's report and destroy happen within it
SPEC = spec_yaml(
    "day",
    """\
max_dollars_per_hour: 5
node_types:
  gpu:
    min_workers: 0
    max_workers: 4
    candidate_factor: 1
    pull_limit_seconds: 7200      # so the provisioning deadline is the net that ends a stall
    image: rayproject/ray:2.60.0-py311-cpu
    disk_gb: 10
    offer:
      filters: {num_gpus: {eq: 1}}
""",
)


@dataclass
class Injected:
    name: str
    vast_id: int
    at: float
    expect: frozenset[str]  # detection classes that may end it
    window: float  # its configured window plus a cadence and a tick of slack
    reason: str | None = None  # the reason its own agent must report, when it ends itself


@dataclass
class Day:
    fleet: Fleet
    injected: list[Injected]
    ledger: list[dict[str, object]]


def _live_workers(f: Fleet) -> list[int]:
    records = f.controller.records()
    return sorted(
        r.vast_id
        for r in records.instances.values()
        if r.role is Role.WORKER and r.live and r.intent is Intent.RUNNING and r.vast_id
    )


def _cheapest_acceptable_machine(f: Fleet) -> int:
    spec = f.controller.specs["day"]
    node_type = spec.node_types["gpu"]
    offers = f.client.search_offers(offer_search(node_type))
    return next(o.machine_id for o in offers if unfit_reason(o, node_type) is None)


@pytest.fixture(scope="module")
def day() -> Iterator[Day]:
    spec = load_spec(SPEC, "day.yaml")
    with fleet(spec) as f:
        w = spec.watchdogs
        c = spec.cadences
        injected: list[Injected] = []
        f.signals.demand_at = lambda now: {("day", "gpu"): 2 if now < START + 9 * H else 0}
        f.agents.working = lambda now: now < START + 9 * H

        injected += _stall(f, spec)
        injected.append(_never_enrolls(f, spec))

        dies = _live_workers(f)[0]
        f.faults[dies] = ContainerFault.network_cut(f.clock.now())
        injected.append(
            Injected(
                "network-cut",
                dies,
                f.clock.now(),
                frozenset({"went_silent"}),
                w.went_silent_after_seconds + c.went_silent_seconds + 60,
            )
        )
        f.run_until(START + 4 * H)

        ray_dies = _live_workers(f)[0]
        f.faults[ray_dies] = ContainerFault(ray_exits_at=f.clock.now() + 1, ray_exit_code=9)
        injected.append(
            Injected(
                "ray-exits",
                ray_dies,
                f.clock.now(),
                frozenset({"worker_report"}),
                DOCKER_GRACE,
                reason="ray_exited",
            )
        )
        f.run_until(START + 5 * H)

        cut = _live_workers(f)[0]
        f.sim.faults.offline(cut)
        injected.append(
            Injected(
                "host-offline",
                cut,
                f.clock.now(),
                frozenset({"went_silent"}),
                w.went_silent_after_seconds + c.went_silent_seconds + 60,
            )
        )
        f.run_until(START + 7 * H)

        injected.append(_orphan(f, spec))
        f.run_until(START + 24 * H, step=30.0)

        ledger = [json.loads(line) for line in f.ledger.read_text().splitlines()]
        yield Day(f, injected, ledger)


def _stall(f: Fleet, spec: ClusterSpec) -> list[Injected]:
    """The cheapest acceptable machine never boots: what was rented on it stalls."""
    stalled_machine = _cheapest_acceptable_machine(f)
    f.sim.faults.never_boots(stalled_machine)
    f.run_until(START + 60)
    stalled = [
        r.vast_id
        for r in f.controller.records().instances.values()
        if r.machine_id == stalled_machine and r.vast_id
    ]
    w, c = spec.watchdogs, spec.cadences
    return [
        Injected(
            "stall",
            v,
            START,
            frozenset({"provision_deadline"}),
            w.provision_deadline_seconds + c.provision_deadline_seconds + 60,
        )
        for v in stalled
    ]


def _never_enrolls(f: Fleet, spec: ClusterSpec) -> Injected:
    """The next new instance after this point runs an image that never starts the agent."""
    known = set(f.agents.faults)
    first_new: list[int] = []

    def never_enrolls(vast_id: int) -> ContainerFault:
        if not first_new and vast_id not in known:
            first_new.append(vast_id)
            return ContainerFault(image=Image.IDLES)
        return ContainerFault()

    f.agents.next_fault = never_enrolls
    f.run_until(START + 3 * H)
    assert first_new, "no instance was rented after the stall was ended"
    rented_at = next(
        r.created_at for r in f.controller.records().instances.values() if r.vast_id == first_new[0]
    )
    f.agents.next_fault = lambda vast_id: ContainerFault()
    w, c = spec.watchdogs, spec.cadences
    return Injected(
        "never-enrolls",
        first_new[0],
        rented_at,
        frozenset({"enrollment_timeout", "never_reported"}),
        w.never_reported_seconds + c.boot_failure_seconds * 2 + 60,
    )


def _orphan(f: Fleet, spec: ClusterSpec) -> Injected:
    """An instance labelled as the cluster's that no record answers for."""
    offer = f.client.search_offers(offer_search(spec.node_types["gpu"]))[-1]
    label = label_for("day", f.controller.journal.lineage, "i9999")
    orphan = f.client.create_instance(offer.id, CreateRequest(image="x", disk_gb=10, label=label))
    w, c = spec.watchdogs, spec.cadences
    return Injected(
        "orphan",
        orphan.instance_id,
        f.clock.now(),
        frozenset({"orphan"}),
        w.orphan_grace_seconds + c.orphan_sweep_seconds + 60,
    )


def _ended_at(day: Day, vast_id: int) -> float | None:
    """When vast destroyed the instance (by the head's call or by its own agent's)."""
    inst = day.fleet.sim.instance(vast_id)
    return inst.destroyed_at if inst is not None else None


def _injected(day: Day, name: str) -> Injected:
    return next(f for f in day.injected if f.name == name)


def _reports(day: Day, vast_id: int) -> list[dict[str, object]]:
    return [
        e
        for e in day.ledger
        if e["instance"] == vast_id and e["class"] == "worker_report" and e["kind"] == "detection"
    ]


def test_every_failure_has_its_detection_in_the_ledger(day: Day) -> None:
    for failure in day.injected:
        assert _classes(day, failure.vast_id) & failure.expect, failure


def _classes(day: Day, vast_id: int) -> set[str]:
    return {
        str(e["class"]) for e in day.ledger if e["instance"] == vast_id and e["kind"] == "detection"
    }


def test_every_injected_failure_was_ended_by_its_net_in_time(day: Day) -> None:
    assert [f.name for f in day.injected] == [
        "stall",
        "never-enrolls",
        "network-cut",
        "ray-exits",
        "host-offline",
        "orphan",
    ]
    for failure in day.injected:
        ended = _ended_at(day, failure.vast_id)
        assert ended is not None, f"{failure} was never ended"
        assert ended - failure.at <= failure.window, (
            f"{failure} ended after {ended - failure.at:.0f}s"
        )
        by_net = _classes(day, failure.vast_id) | {
            str(e["class"])
            for e in day.ledger
            if e["instance"] == failure.vast_id and e["kind"] == "decision"
        }
        assert by_net & failure.expect, f"{failure}: ended by {by_net}"
        reasons = [r["data"]["reason"] for r in _reports(day, failure.vast_id)]  # type: ignore[index]
        assert reasons == ([failure.reason] if failure.reason else []), failure


def test_a_worker_whose_ray_exits_reports_then_destroys_itself_with_its_own_key(day: Day) -> None:
    failure = _injected(day, "ray-exits")
    (report,) = _reports(day, failure.vast_id)
    assert report["data"]["trusted"] is True  # type: ignore[index]
    assert "code 9" in str(report["message"])
    ended = _ended_at(day, failure.vast_id)
    assert ended is not None and float(report["time"]) <= ended  # type: ignore[arg-type]
    path = f"/api/v0/instances/{failure.vast_id}/"
    deletes = [r for r in day.fleet.sim.requests if r.method == "DELETE" and r.path == path]
    assert [d.identity for d in deletes] == ["instance"]  # its own key; the head never called
    agent = day.fleet.agent(failure.vast_id)
    assert agent is not None and agent.phase == "confirmed"


def test_the_network_drop_was_marked_lost_before_it_was_ended(day: Day) -> None:
    cut = _injected(day, "host-offline").vast_id
    lost = [e for e in day.ledger if e["instance"] == cut and e["class"] == "lost"]
    silent = [
        e
        for e in day.ledger
        if e["instance"] == cut and e["class"] == "went_silent" and e["kind"] == "detection"
    ]
    assert lost and silent
    assert float(lost[0]["time"]) < float(silent[0]["time"])  # type: ignore[arg-type]


def test_no_healthy_machine_was_ended_before_the_idle_period(day: Day) -> None:
    failed = {f.vast_id for f in day.injected}
    idle_from = START + 9 * H
    healthy = set(day.fleet.sim.meter.instance_ids()) - failed
    assert len(healthy) >= 2
    for vast_id in healthy:
        ended = _ended_at(day, vast_id)
        assert ended is not None and ended >= idle_from, f"healthy {vast_id} ended at {ended}"
        assert not any(r["data"]["reason"] != "signal" for r in _reports(day, vast_id))  # type: ignore[index]


def test_idle_workers_were_stopped_keeping_their_disks_then_destroyed_by_the_chain(
    day: Day,
) -> None:
    """The money chain stops first; the stop is TERM to PID 1, which the agent reports as every
    TERM, and the head answers "deliberate stop": the agent keeps its disk and exits within
    docker's stop grace (no self-destroy), vast bills storage only, and the chain's destroy step
    ends the instance at its timer (the head's call)."""
    w = day.fleet.controller.specs["day"].watchdogs
    stops = {
        e["instance"]: float(e["time"])  # type: ignore[arg-type]
        for e in day.ledger
        if e["class"] == "idle_stop" and e["kind"] == "outcome"
    }
    assert stops, "nothing was stopped in the idle period"
    for instance, stopped in stops.items():
        assert isinstance(instance, int)
        assert _reports(day, instance) == []  # no ending: the report was of a deliberate stop
        (kept,) = [
            e for e in day.ledger if e["instance"] == instance and e["class"] == "deliberate_stop"
        ]
        assert kept["data"]["reason"] == "signal" and kept["data"]["trusted"] is True  # type: ignore[index]
        assert stopped <= float(kept["time"]) <= stopped + DOCKER_GRACE  # type: ignore[arg-type]
        agent = day.fleet.agent(instance)
        assert agent is not None and agent.phase == "stopped" and agent.destroys == []
        assert agent.exited_at is not None and agent.exited_at <= stopped + DOCKER_GRACE
        ended = _ended_at(day, instance)
        wait = w.idle_destroy_after_seconds - w.idle_stop_after_seconds
        assert ended is not None and stopped + wait - 60 <= ended <= stopped + wait + 60
        meter = day.fleet.sim.meter
        storage = [s for s in meter.segments(instance) if s.start >= stopped and s.start < ended]
        assert storage and {s.status for s in storage} == {"stopped"}
        path = f"/api/v0/instances/{instance}/"
        deletes = [r for r in day.fleet.sim.requests if r.method == "DELETE" and r.path == path]
        assert [d.identity for d in deletes] == ["account"]  # the head's destroy, not the agent's
    destroys = {
        e["instance"] for e in day.ledger if e["class"] == "idle_destroy" and e["kind"] == "call"
    }
    assert destroys == set(stops)


def test_nothing_bills_at_the_end_and_every_instance_has_a_story(day: Day) -> None:
    assert day.fleet.sim.instances == {}
    ever = set(day.fleet.sim.meter.instance_ids())
    told = {e["instance"] for e in day.ledger if e["instance"] is not None}
    assert ever <= told
    records = day.fleet.controller.records()
    assert all(r.phase is Phase.DESTROYED for r in records.instances.values())
