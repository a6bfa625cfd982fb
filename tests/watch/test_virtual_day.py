"""A whole virtual day of one cluster: each way a machine dies, an idle period, and no false ends.

The real controller (planner, nets, money chain, executor, ledger) runs against an in-process
vastsim on virtual time; the agents are played by `bench.harness` through the head's own
decisions. The day, in virtual hours:

- 0h: Ray wants 2 workers. The cheapest machine never boots: provisioning stalls, and the
  provisioning deadline (fixed when the request was placed) ends it.
- the next machine rented after that runs but its start-up never completes (never enrolls).
- 3h: a worker's process dies while its instance keeps running: only the went-silent net sees it.
- 5h: a worker's host drops off the network: it is marked lost first (never destroyed for that),
  and ended when its own report has been silent past the went-silent threshold.
- 7h: an instance with our label but no record appears at vast: the orphan sweep ends it.
- 9h: the demand stops: the idle workers are stopped, then destroyed (stop first).

Each failed machine must be ended by the expected net within its window; healthy ones only by the
money chain after the demand stopped; the ledger must tell each story.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bench.harness import START, Fleet, Mode, fleet
from reconciler.applying.search import offer_search
from reconciler.model.observed import CreateRequest
from reconciler.model.records import Intent, Phase, Role, label_for
from reconciler.planning.offers import unfit_reason
from reconciler.spec.loader import load_texts

H = 3600.0
SPEC = """\
apiVersion: ray-vast/v1
kind: Cluster
metadata: {name: day}
spec:
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
"""


@dataclass
class Injected:
    vast_id: int
    at: float
    expect: frozenset[str]  # detection classes that may end it
    window: float  # its configured window plus a cadence and a tick of slack


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
    (spec,) = load_texts([("day.yaml", SPEC)]).clusters
    with fleet(spec) as f:
        w = spec.watchdogs
        c = spec.cadences
        injected: list[Injected] = []
        f.signals.demand_at = lambda now: {("day", "gpu"): 2 if now < START + 9 * H else 0}
        f.agents.working = lambda now: now < START + 9 * H

        stalled_machine = _cheapest_acceptable_machine(f)
        f.sim.faults.never_boots(stalled_machine)
        f.run_until(START + 60)
        stalled = [
            r.vast_id
            for r in f.controller.records().instances.values()
            if r.machine_id == stalled_machine and r.vast_id
        ]
        injected += [
            Injected(
                v,
                START,
                frozenset({"provision_deadline"}),
                w.provision_deadline_seconds + c.provision_deadline_seconds + 60,
            )
            for v in stalled
        ]

        # the next new instance after this point never completes its start-up
        known = set(f.agents.modes)
        first_new: list[int] = []

        def never_enrolls(vast_id: int) -> Mode:
            if not first_new and vast_id not in known:
                first_new.append(vast_id)
                return Mode.NEVER_ENROLLS
            return Mode.HEALTHY

        f.agents.next_mode = never_enrolls
        f.run_until(START + 3 * H)
        assert first_new, "no instance was rented after the stall was ended"
        rented_at = next(
            r.created_at
            for r in f.controller.records().instances.values()
            if r.vast_id == first_new[0]
        )
        injected.append(
            Injected(
                first_new[0],
                rented_at,
                frozenset({"enrollment_timeout", "never_reported"}),
                w.never_reported_seconds + c.boot_failure_seconds * 2 + 60,
            )
        )
        f.agents.next_mode = lambda vast_id: Mode.HEALTHY

        dies = _live_workers(f)[0]
        f.agents.modes[dies] = Mode.SILENT
        injected.append(
            Injected(
                dies,
                f.clock.now(),
                frozenset({"went_silent"}),
                w.went_silent_after_seconds + c.went_silent_seconds + 60,
            )
        )
        f.run_until(START + 5 * H)

        cut = _live_workers(f)[0]
        f.sim.faults.offline(cut)
        injected.append(
            Injected(
                cut,
                f.clock.now(),
                frozenset({"went_silent"}),
                w.went_silent_after_seconds + c.went_silent_seconds + 60,
            )
        )
        f.run_until(START + 7 * H)

        offer = f.client.search_offers(offer_search(spec.node_types["gpu"]))[-1]
        label = label_for("day", f.controller.journal.lineage, "i9999")
        orphan = f.client.create_instance(
            offer.id, CreateRequest(image="x", disk_gb=10, label=label)
        )
        injected.append(
            Injected(
                orphan.instance_id,
                f.clock.now(),
                frozenset({"orphan"}),
                w.orphan_grace_seconds + c.orphan_sweep_seconds + 60,
            )
        )
        f.run_until(START + 24 * H, step=30.0)

        ledger = [json.loads(line) for line in f.ledger.read_text().splitlines()]
        yield Day(f, injected, ledger)


def _ended_at(day: Day, vast_id: int) -> float | None:
    calls = [
        e
        for e in day.ledger
        if e["instance"] == vast_id and e["kind"] == "outcome" and "destroyed" in str(e["message"])
    ]
    return float(calls[0]["time"]) if calls else None  # type: ignore[arg-type]


def test_every_failure_has_its_detection_in_the_ledger(day: Day) -> None:
    for failure in day.injected:
        assert _classes(day, failure.vast_id) & failure.expect, failure


def _classes(day: Day, vast_id: int) -> set[str]:
    return {
        str(e["class"]) for e in day.ledger if e["instance"] == vast_id and e["kind"] == "detection"
    }


def test_every_injected_failure_was_ended_by_its_net_in_time(day: Day) -> None:
    assert len(day.injected) == 5
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


def test_the_network_drop_was_marked_lost_before_it_was_ended(day: Day) -> None:
    cut = day.injected[3].vast_id
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
    for entry in day.ledger:
        if entry["kind"] != "outcome" or "destroyed" not in str(entry["message"]):
            continue
        if entry["instance"] in failed:
            continue
        assert float(entry["time"]) >= idle_from, f"healthy machine ended early: {entry}"  # type: ignore[arg-type]


def test_idle_workers_were_stopped_before_they_were_destroyed(day: Day) -> None:
    stops = {
        e["instance"]: float(e["time"])
        for e in day.ledger
        if e["class"] == "idle_stop" and e["kind"] == "outcome"
    }  # type: ignore[arg-type]
    destroys = {
        e["instance"]: float(e["time"])
        for e in day.ledger
        if e["class"] == "idle_destroy" and e["kind"] == "outcome"
    }  # type: ignore[arg-type]
    assert stops, "nothing was stopped in the idle period"
    for instance, stopped in stops.items():
        assert instance in destroys and destroys[instance] > stopped


def test_nothing_bills_at_the_end_and_every_instance_has_a_story(day: Day) -> None:
    assert day.fleet.sim.instances == {}
    ever = set(day.fleet.sim.meter.instance_ids())
    told = {e["instance"] for e in day.ledger if e["instance"] is not None}
    assert ever <= told
    records = day.fleet.controller.records()
    assert all(r.phase is Phase.DESTROYED for r in records.instances.values())
