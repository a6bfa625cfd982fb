"""A deliberate stop keeps the disk (DESIGN.md 10; issue 16's first item).

The money chain stops a quiet worker: the head records intent `stopped`, vast's stop sends TERM to
PID 1, the agent reports first as always, and the head's answer says "deliberate stop": the agent
stops Ray, keeps its certificate and key on the instance's disk and lets the container stop (vast:
stopped, storage billed only). When demand returns before the destroy timer, the planner starts
the instance again (no new rental; the image is on its disk: no pull) and the agent resumes with
its kept certificate instead of enrolling. Quiet for longer, it is destroyed. A restart the head
did not ask for is still refused and ends the instance, and a start vast cannot carry out (its GPU
was taken meanwhile) is replaced by a rental after `start_limit_seconds`.

Ray is played as it is: a node it drains for idle termination ends its raylet (`played`), which
the agent, having acknowledged the stop first (DESIGN.md 11, `test_stop_pending`), takes as part
of the stop.

Before issue 16 the agent answered every TERM with a destroy: the "stop (disk kept)" ended the
instance 10 minutes into the quiet, and the demand that came back rented a new one and pulled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fleetsim.harness import START, Fleet, fleet
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from tests.scenarios.world import (
    IMAGE,
    H,
    M,
    Signals,
    alive,
    cluster,
    ended_by,
    lines,
    rented,
    run,
    workers,
)
from vastsim import Market

NAME = "keep"
KEY = (NAME, "gpu")
# the image takes an hour to pull on any host: a start that pulled could not serve in a minute
HOUR_PULL = 3600.0


def spans(*windows: tuple[float, float]) -> Callable[[float], bool]:
    return lambda now: any(START + a <= now < START + b for a, b in windows)


def slow_market() -> Market:
    market = Market.default()
    fastest = max(m.pull_speed_mbps for m in market)
    market.images[IMAGE] = HOUR_PULL * fastest / 8 / 1000
    for machine in market:
        machine.cache.add(IMAGE)  # the first rental finds it cached, as the seed's live test did
    return market


def the_record(f: Fleet, vast_id: int) -> InstanceRecord:
    [record] = [r for r in f.controller.records().instances.values() if r.vast_id == vast_id]
    return record


def run_quiet_then_back(f: Fleet, work: Callable[[float], bool]) -> int:
    """One node type, min 0, the default money chain (stop at 10 quiet minutes, destroy at 30);
    Ray's demand and the node's work follow `work`: 20 minutes of both, then quiet until 35
    minutes. Returns the worker, stopped."""
    f.controller.signals = Signals(
        f.clock, demand_at=lambda now: {KEY: 1 if work(now) else 0}, played=f.agents
    )
    f.agents.working = work
    run(f, START + 20 * M)
    [vast_id] = workers(f, NAME)
    assert rented(f, NAME).keys() == {vast_id}
    run(f, START + 35 * M)  # quiet since 20 min: stopped at about 30 min, destroy due at 50
    return vast_id


def test_quiet_stops_keeping_the_disk_demand_starts_it_again_and_longer_quiet_destroys() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M), (40 * M, 60 * M))
    with fleet(spec, market=slow_market()) as f:
        vast_id = run_quiet_then_back(f, work)

        # --- stopped, its disk kept: vast says stopped and bills storage only ---------------
        inst = f.sim.instance(vast_id)
        assert inst is not None and inst.actual_status == "stopped"
        record = the_record(f, vast_id)
        assert (record.intent, record.phase) == (Intent.STOPPED, Phase.STOPPED)
        assert record.stopped_deliberately_at is not None
        assert f.sim.meter.rate(vast_id) == inst.storage_dph > 0
        first = f.agent(vast_id)
        assert first is not None and first.exited_at is not None  # PID 1 exited: no destroy
        assert first.destroys == [] and first.ending is not None
        assert (first.ending.reason, first.phase) == ("signal", "stopped")
        assert vast_id in f.agents.disks  # the certificate and key, on the instance's disk
        assert f.agents.disks[vast_id]["certificate"]["key_pem"].startswith("-----BEGIN")
        assert [e["instance"] for e in lines(f, "deliberate_stop")] == [vast_id]
        assert vast_id not in ended_by(f)
        assert [e["instance"] for e in lines(f, "idle_stop", "decision")] == [vast_id]
        # the host drops the image from its cache meanwhile: the disk still has it
        inst.machine.cache.discard(IMAGE)

        # --- demand returns before the destroy timer: started, resumed, serving ------------
        run(f, START + 41 * M)
        run(f, START + 43 * M)
        assert rented(f, NAME).keys() == {vast_id}  # no new rental
        starts = lines(f, "resume", "decision")
        assert [e["instance"] for e in starts] == [vast_id]
        assert inst.actual_status == "running"
        assert inst.running_since is not None
        assert inst.running_since - starts[0]["time"] < 60  # no pull (an hour's)
        again = f.agent(vast_id)
        assert again is not None and again is not first
        assert again.resumed_at is not None and again.enrolled_at is None  # resumed, not enrolled
        assert again.phase == "worker" and again.last_heartbeat_success is not None
        assert vast_id not in f.agents.disks  # the identity served its one resume
        record = the_record(f, vast_id)
        assert (record.intent, record.phase, record.role) == (
            Intent.RUNNING,
            Phase.SERVING,
            Role.WORKER,
        )
        assert record.stop_due_at is None and record.destroy_due_at is None
        assert [e["instance"] for e in lines(f, "resumed")] == [vast_id]
        assert not lines(f, "second_enrollment") and not lines(f, "resume_refused")
        assert f.sim.meter.rate(vast_id) == inst.dph_total

        # --- quiet for longer: stopped again, then destroyed at the destroy timer ----------
        run(f, START + 75 * M)
        assert inst.actual_status == "stopped"
        run(f, START + 2 * H)
        assert alive(f, NAME) == set()
        assert ended_by(f)[vast_id] == "idle_destroy"
        assert len(lines(f, "deliberate_stop")) == 2
        assert rented(f, NAME).keys() == {vast_id}
        assert f.sim.meter.rate(vast_id) == 0.0
        # the agent never destroyed its own instance: the head's timers did, and vast billed
        # storage only while it was stopped
        stopped = [s for s in f.sim.meter.segments(vast_id) if s.status == "stopped"]
        assert stopped and all(s.rate == inst.storage_dph for s in stopped)


def test_an_unexpected_restart_after_the_resume_is_still_refused_and_ends_the_instance() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M), (40 * M, 3 * H))
    with fleet(spec, market=slow_market()) as f:
        vast_id = run_quiet_then_back(f, work)
        run(f, START + 45 * M)
        resumed = f.agent(vast_id)
        assert resumed is not None and resumed.resumed_at is not None
        # PID 1 crashes: vast starts the container again, a boot the head did not ask for
        f.faults[vast_id] = replace(f.faults[vast_id], pid1_killed_at=f.clock.now() + 30)
        run(f, START + 50 * M)
        restarted = f.agent(vast_id)
        assert restarted is not None and restarted is not resumed
        assert restarted.ending is not None
        assert restarted.ending.reason == "second_enrollment"  # no identity left to resume with
        assert ended_by(f)[vast_id] == "worker_report:second_enrollment"
        assert vast_id not in alive(f, NAME)


def test_a_start_the_head_did_not_ask_for_is_refused_though_the_disk_has_the_identity() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    with fleet(spec, market=slow_market()) as f:
        vast_id = run_quiet_then_back(f, spans((0, 20 * M)))
        assert vast_id in f.agents.disks
        inst = f.sim.instance(vast_id)
        assert inst is not None
        # someone starts it behind the head's back: its intent is still stopped
        f.sim.mutate(lambda now: f.sim.fleet.start(inst, now))
        f.sim.advance(30)  # it boots and asks to resume before the controller looks
        booted = f.agent(vast_id)
        assert booted is not None and booted.ending is not None
        assert booted.ending.reason == "resume_refused" and booted.resumed_at is None
        assert [e["data"]["refused"] for e in lines(f, "resume_refused")] == ["resume_refused"]
        run(f, START + 40 * M)
        assert ended_by(f)[vast_id] == "worker_report:resume_refused"
        assert vast_id not in alive(f, NAME)


def test_a_start_stuck_in_scheduling_is_destroyed_and_replaced_by_a_rental() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M), (40 * M, 3 * H))
    with fleet(spec, market=slow_market()) as f:
        vast_id = run_quiet_then_back(f, work)
        inst = f.sim.instance(vast_id)
        assert inst is not None
        # another tenant takes its GPU while it is stopped: a start waits in `scheduling`
        f.sim.faults.take_gpus(inst.machine.machine_id)
        run(f, START + 43 * M)
        assert inst.actual_status == "scheduling"
        assert rented(f, NAME).keys() == {vast_id}  # the start is given its limit first
        limit = spec.watchdogs.start_limit_seconds
        run(f, START + 40 * M + limit + 3 * M)
        assert ended_by(f)[vast_id] == "start_stuck"
        [stuck] = lines(f, "start_stuck", "detection")
        assert "scheduling" in stuck["message"]
        assert vast_id not in alive(f, NAME)
        run(f, START + 70 * M)
        serving = workers(f, NAME)
        assert len(serving) == 1 and vast_id not in serving
        assert len(rented(f, NAME)) == 2  # one replacement, on another machine
