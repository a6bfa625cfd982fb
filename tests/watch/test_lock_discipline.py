"""Decide under the lock, call vast outside it (issue 14): heartbeats are answered while a tick
waits on a slow vast, and the executor refuses to call vast while the records lock is held.

The world is `bench/head_latency.py`'s: a served vastsim, the real controller on the real file
store, the cluster's real head on real TLS ports sharing its records and its one applier, and a
serving worker with a certificate from the cluster's CA. vastsim answers every create 3 s late.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from bench.head_latency import WORKER, latency_world
from reconciler.applying.executor import ApplyResult
from reconciler.applying.steps import LockHeldError
from reconciler.head.decisions import doomed
from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import InstanceRecord, Intent, Phase, Records
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE


def test_heartbeats_are_answered_while_a_tick_waits_on_a_slow_create(tmp_path: Path) -> None:
    with latency_world(tmp_path, rentals=2, rate_limits=False) as world:
        world.sim.faults.slow(CREATE_ROUTE, seconds=3.0, count=2)
        tick = threading.Thread(target=world.controller.tick)
        tick.start()
        try:
            # the intent is saved before the call: a pending create means the call is under way
            def creating() -> list[str]:
                return [
                    r.id
                    for r in world.records().instances.values()
                    if r.phase is Phase.PENDING_CREATE
                ]

            (pending,) = wait_for(creating, timeout=20, what="a create under way")
            answered = [world.heartbeat()[0] for _ in range(3)]
            # three heartbeats answered, and the create they overlapped is still waiting on vast
            still = world.records().instances[pending].phase
        finally:
            tick.join(timeout=60)
        assert answered == [200, 200, 200]
        assert still is Phase.PENDING_CREATE, "a heartbeat waited for the create to finish"
        assert not tick.is_alive()
        rented = [r for r in world.records().instances.values() if r.id != WORKER and r.vast_id]
        assert len(rented) == 2
        assert world.records().instances[WORKER].live  # its heartbeats kept it a worker


def test_the_executor_refuses_to_call_vast_under_the_records_lock(tmp_path: Path) -> None:
    with latency_world(tmp_path, rentals=0, rate_limits=False) as world:
        worker = world.records().instances[WORKER]
        destroy = Action(
            ActionKind.DESTROY, worker.cluster, "test", record=worker.id, vast_id=worker.vast_id
        )
        with world.controller.lock, pytest.raises(LockHeldError):
            world.controller.applier.carry_out([destroy])
        assert world.sim.instance(worker.vast_id or 0) is not None
        assert world.records().instances[WORKER].live


DESTROY_ROUTE = "DELETE /api/v0/instances/{id}/"


def _destroy_of(record: InstanceRecord, reason: str = "test") -> Action:
    return Action(
        ActionKind.DESTROY, record.cluster, reason, record=record.id, vast_id=record.vast_id
    )


def test_a_change_made_during_a_call_is_kept_and_the_machine_gets_one_call(
    tmp_path: Path,
) -> None:
    """While a destroy waits on vast, a heartbeat's change to the same record lands (the lock is
    free) and survives the outcome (the executor sets only its own fields); a second executor
    asked to destroy the same machine meanwhile skips it, and vast sees one destroy."""
    with latency_world(tmp_path, rentals=0, rate_limits=False) as world:
        world.sim.faults.slow(DESTROY_ROUTE, seconds=2.0)
        worker = world.records().instances[WORKER]
        results: list[ApplyResult] = []
        first = threading.Thread(
            target=lambda: results.append(world.controller.applier.carry_out([_destroy_of(worker)]))
        )
        first.start()
        try:
            wait_for(
                lambda: world.records().instances[WORKER].phase is Phase.DESTROYING,
                timeout=10,
                what="the destroy's intent",
            )
            world.controller.journal.update(
                lambda records: _with(records, replace(records.instances[WORKER], sample_at=7.0))
            )
            second = world.controller.applier.carry_out([_destroy_of(worker, "again")])
        finally:
            first.join(timeout=30)
        assert [a.reason for a, _ in second.skipped] == ["again"] and not second.done
        assert [a.reason for a in results[0].done] == ["test"]
        ended = world.records().instances[WORKER]
        assert ended.phase is Phase.DESTROYED and ended.sample_at == 7.0
        calls = [r for r in world.sim.requests if r.route == DESTROY_ROUTE]
        assert len(calls) == 1


def test_a_stop_planned_before_the_head_doomed_the_machine_is_not_sent(tmp_path: Path) -> None:
    with latency_world(tmp_path, rentals=0, rate_limits=False) as world:
        worker = world.records().instances[WORKER]
        stop = Action(
            ActionKind.STOP, worker.cluster, "idle", record=worker.id, vast_id=worker.vast_id
        )
        # the head's decision lands between the plan and its call: intent destroyed
        now = world.controller.clock.now()
        world.controller.journal.update(lambda records: _with(records, doomed(worker, "t", now)))
        result = world.controller.applier.carry_out([stop])
        assert [why for _, why in result.skipped] == ["a destroy of it is under way"]
        assert world.records().instances[WORKER].intent is Intent.DESTROYED
        assert not [r for r in world.sim.requests if r.method == "PUT" and "instances" in r.route]


def _with(records: Records, record: InstanceRecord) -> Records:
    return replace(records, instances={**records.instances, record.id: record})
