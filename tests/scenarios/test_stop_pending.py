"""The agent hears of a money-chain stop before Ray is drained (DESIGN.md 11; issue 21 point 4).

Ray ends a drained idle raylet at once, and vast carries a stop out seconds after the call. So
when the money chain drained an idle worker's node and then called vast's stop, the agent saw Ray
exit before the stop's TERM came, reported `ray_exited`, and the head, which does not take that
for its own stop, ended the record: the instance was destroyed with its disk, and the demand that
came back rented and pulled a new one. It passed only while vastsim delivered the TERM at the
moment of the call.

Now the stop is a handshake the records show: the head records intent `stopped` and the time it
asked (`stop_asked_at`), its next heartbeat answer says "stop pending", the agent acknowledges
at once (`stop_acked_at`), and only then is the node drained through Ray and vast's stop
called. Ray's exit is then part of the stop; on TERM the agent reports, hears "deliberate stop",
keeps its identity on the disk and lets the container stop. A drain Ray rejects (work landed
there) cancels the stop: the record's intent goes back to running, its timers are cleared, and
the next heartbeat answer tells the agent, which serves on. An agent that never acknowledges is
stopped without the drain after a couple of heartbeat intervals, the disk-safe way.

Here the played Ray ends a node it drained (`Signals(played=...)`) and vastsim's stop lands
0, 2, 5 or 10 s after the call (`Timing.stop_delay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pytest

from fleetsim.agents import ContainerFault, Span
from fleetsim.harness import START, Fleet, fleet
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from tests.scenarios.world import (
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
from vastsim import Timing

NAME = "pend"
KEY = (NAME, "gpu")


def spans(*windows: tuple[float, float]) -> Callable[[float], bool]:
    return lambda now: any(START + a <= now < START + b for a, b in windows)


def the_record(f: Fleet, vast_id: int) -> InstanceRecord:
    [record] = [r for r in f.controller.records().instances.values() if r.vast_id == vast_id]
    return record


def said(f: Fleet, vast_id: int, text: str) -> list[float]:
    """When the agent of the instance's latest boot logged a line containing `text`."""
    agent = f.agent(vast_id)
    assert agent is not None
    return [at for at, c in agent.trace if text in getattr(c, "message", "")]


@pytest.mark.parametrize("delay", [0.0, 2.0, 5.0, 10.0])
def test_a_drained_idle_worker_is_stopped_with_its_disk_and_demand_brings_it_back(
    delay: float,
) -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M), (40 * M, 60 * M))
    with fleet(spec, timing=Timing(stop_delay=delay)) as f:
        f.controller.signals = Signals(
            f.clock, demand_at=lambda now: {KEY: 1 if work(now) else 0}, played=f.agents
        )
        f.agents.working = work
        run(f, START + 20 * M)
        [vast_id] = workers(f, NAME)
        run(f, START + 35 * M)  # quiet since 20 min: the stop timer falls due at about 30

        # --- stopped with its disk: vast says stopped, nothing destroyed it ---------------
        inst = f.sim.instance(vast_id)
        assert inst is not None, f"the instance was destroyed: {ended_by(f).get(vast_id)}"
        assert vast_id not in ended_by(f), f"ended by {ended_by(f)[vast_id]}"
        assert inst.actual_status == "stopped"
        first = f.agent(vast_id)
        assert first is not None and first.ending is not None
        assert (first.ending.reason, first.phase) == ("signal", "stopped")
        assert first.destroys == []
        assert vast_id in f.agents.disks  # the identity is on the instance's disk
        record = the_record(f, vast_id)
        assert (record.intent, record.phase) == (Intent.STOPPED, Phase.STOPPED)
        assert record.stopped_deliberately_at is not None

        # --- the handshake, in order: asked, acknowledged, drained, stopped, TERM ---------
        assert record.stop_asked_at is not None and record.stop_acked_at is not None
        assert record.stop_asked_at <= record.stop_acked_at
        # the agent heard it in the heartbeat after the ask, and acknowledged at once
        assert (
            record.stop_acked_at - record.stop_asked_at
            <= spec.watchdogs.heartbeat_interval_seconds + 1
        )
        [asked] = lines(f, "stop_pending")
        [acked] = lines(f, "stop_acknowledged")
        [call] = lines(f, "idle_stop", "call")
        assert asked["time"] <= acked["time"] <= call["time"]
        assert call["time"] - acked["time"] <= 2  # the acknowledgment wakes the controller
        assert first.ray_drained_at is not None and first.ray_drained_at >= acked["time"]
        assert first.stopped_at is not None
        assert first.stopped_at - call["time"] == pytest.approx(delay, abs=0.01)
        if delay >= 1:
            # Ray's exit came first and was part of the stop, not an ending
            assert first.ray_gone_at is not None and first.ray_gone_at < first.stopped_at
            assert said(f, vast_id, "part of the stop")
        assert not lines(f, "worker_report")
        assert [e["instance"] for e in lines(f, "deliberate_stop")] == [vast_id]

        # --- demand returns: the same instance starts again and resumes -------------------
        run(f, START + 43 * M)
        assert rented(f, NAME).keys() == {vast_id}  # no new rental
        again = f.agent(vast_id)
        assert again is not None and again is not first
        assert again.resumed_at is not None and again.enrolled_at is None
        assert again.phase == "worker" and again.last_heartbeat_success is not None
        record = the_record(f, vast_id)
        assert (record.intent, record.phase, record.role) == (
            Intent.RUNNING,
            Phase.SERVING,
            Role.WORKER,
        )
        assert record.stop_asked_at is None and record.stop_acked_at is None
        assert again.state is not None and again.state.stop_pending_at is None


@dataclass
class BusyAtTheDrain(Signals):
    """Ray's view reads the node idle, but work lands on it between that read and the drain:
    Ray rejects every idle drain (until `accepts_from`)."""

    accepts_from: float = float("inf")
    asked: list[tuple[float, str]] | None = None

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        now = self.clock.now()
        if self.asked is None:
            self.asked = []
        self.asked += [(now, rid) for rid in record_ids]
        if now < self.accepts_from:
            return dict.fromkeys(record_ids, False)
        return super().drain_idle(records, record_ids, deadline)


def test_a_rejected_drain_cancels_the_stop_and_tells_the_agent_which_serves_on() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M))
    with fleet(spec, timing=Timing(stop_delay=5.0)) as f:
        signals = BusyAtTheDrain(
            f.clock, demand_at=lambda now: {KEY: 1 if work(now) else 0}, played=f.agents
        )
        f.controller.signals = signals
        f.agents.working = work
        run(f, START + 20 * M)
        [vast_id] = workers(f, NAME)
        run(f, START + 33 * M)

        # the stop was asked and acknowledged, the drain refused: cancelled, never called
        assert signals.asked, "the stop never reached the drain"
        [asked, *_] = lines(f, "stop_pending")
        [acked, *_] = lines(f, "stop_acknowledged")
        [cancelled, *_] = lines(f, "stop_cancelled")
        assert asked["time"] <= acked["time"] <= cancelled["time"]
        assert "drain" in cancelled["message"]
        assert not lines(f, "idle_stop", "call")
        # the record is back to running, its timers cleared
        record = the_record(f, vast_id)
        assert (record.intent, record.phase) == (Intent.RUNNING, Phase.SERVING)
        assert record.stop_asked_at is None and record.stop_acked_at is None
        assert record.stop_due_at is None or record.stop_due_at > cancelled["time"]
        # the agent was told in its next heartbeat answer, and serves on with its Ray
        agent = f.agent(vast_id)
        assert agent is not None and agent.state is not None
        heard = said(f, vast_id, "stop pending")
        told = said(f, vast_id, "stop cancelled")
        assert heard and told and heard[0] <= told[0]
        assert told[0] - cancelled["time"] <= spec.watchdogs.heartbeat_interval_seconds + 1
        assert agent.phase == "worker" and agent.state.stop_pending_at is None
        assert agent.ray_drained_at is None and agent.ray_gone_at is None
        inst = f.sim.instance(vast_id)
        assert inst is not None and inst.actual_status == "running"
        assert vast_id in alive(f, NAME) and workers(f, NAME) == {vast_id}
        assert agent.last_heartbeat_success is not None
        assert agent.last_heartbeat_success >= f.clock.now() - 31


def test_an_agent_that_never_acknowledges_is_stopped_without_the_drain_and_keeps_its_disk() -> None:
    spec = cluster(NAME, min_workers=0, max_workers=2, factor=1)
    work = spans((0, 20 * M))
    with fleet(spec, timing=Timing(stop_delay=5.0)) as f:
        signals = BusyAtTheDrain(
            f.clock,
            demand_at=lambda now: {KEY: 1 if work(now) else 0},
            played=f.agents,
            accepts_from=START,
        )
        f.controller.signals = signals
        f.agents.working = work
        run(f, START + 20 * M)
        [vast_id] = workers(f, NAME)
        # the head cannot hear its heartbeats from before the stop timer until after it
        f.faults[vast_id] = ContainerFault(heartbeats_blocked=Span(START + 29 * M, START + 33 * M))
        run(f, START + 35 * M)

        [asked] = lines(f, "stop_pending")
        assert not lines(f, "stop_acknowledged")
        [call] = lines(f, "stop_unacknowledged", "call")
        window = 2 * spec.watchdogs.heartbeat_interval_seconds
        assert call["time"] - asked["time"] >= window
        assert signals.asked is None  # not drained: Ray's exit cannot come before the TERM
        inst = f.sim.instance(vast_id)
        assert inst is not None and inst.actual_status == "stopped"
        agent = f.agent(vast_id)
        assert agent is not None and agent.ending is not None
        assert (agent.ending.reason, agent.phase) == ("signal", "stopped")
        assert agent.destroys == [] and vast_id in f.agents.disks
        assert vast_id not in ended_by(f)


def test_work_in_the_acknowledging_heartbeat_calls_the_stop_off_and_the_timers_stay_true() -> None:
    """The e2e run of issue 21's CI: the heartbeat that acknowledged the stop carried a busy
    sample, the stop was called on the acknowledgment before the next idle scan read that
    sample, and the scan then cleared both timers of a machine vast had already stopped: a
    stopped worker with no destroy timer, its disk billing until someone noticed. Traffic seen
    before vast's stop is called calls the stop off; auto-stop reads it in the same pass."""
    work = spans((0, 20 * M))
    burst: list[float] = []
    # the idle scan out of step with the stop timer (as the e2e's 2-s cadences were)
    spec = cluster(
        NAME,
        min_workers=0,
        max_workers=2,
        factor=1,
        watchdogs={"heartbeat_interval_seconds": 5},
        head="cadences: {idle_scan_seconds: 45}",
    )

    def working(now: float) -> bool:
        return work(now) or any(at <= now < at + 45 for at in burst)

    with fleet(spec, timing=Timing(stop_delay=3.0)) as f:
        f.controller.signals = Signals(
            f.clock, demand_at=lambda now: {KEY: 1 if work(now) else 0}, played=f.agents
        )
        f.agents.working = working
        run(f, START + 20 * M)
        [vast_id] = workers(f, NAME)

        def burst_at_the_ask() -> None:
            record = the_record(f, vast_id)
            if record.stop_asked_at is not None and not burst:
                burst.append(f.clock.now())

        run(f, START + 33 * M, each=burst_at_the_ask)
        assert burst, "the stop was never asked"
        # the burst reached the head in the heartbeat that answered the ask: no stop was called
        assert not lines(f, "idle_stop", "call"), lines(f, "idle_stop")
        [off] = lines(f, "stop_cancelled")
        assert "traffic" in off["message"] and off["time"] >= burst[0]
        inst = f.sim.instance(vast_id)
        assert inst is not None and inst.actual_status == "running"
        record = the_record(f, vast_id)
        assert (record.intent, record.phase) == (Intent.RUNNING, Phase.SERVING)

        # quiet again after the burst: stopped at the timer, then destroyed at the next one
        run(f, START + 75 * M)
        assert [e["instance"] for e in lines(f, "idle_stop", "call")] == [vast_id]
        assert ended_by(f).get(vast_id) == "idle_destroy", ended_by(f)
