"""A lost worker whose path comes back keeps serving: lost never ends a machine (DESIGN.md 11).

Issue 21 point 5: "lost never destroys" was broken twice. The head revoked a lost worker's
certificate, so when its path healed its next heartbeat was answered 403 and it destroyed
itself; and the controller drained a lost worker's node through Ray, and Ray ends a drained
idle raylet (the agent then reports `ray_exited` and destroys itself). The seed: "The lost marker:
it flags the machine and stops routing to it, and deliberately does not destroy."

Each scenario cuts one worker's path: the head hears nothing from it and vast has lost its
host's heartbeat (`unknown`), so every liveness channel is cold and it is marked lost; the cut
heals before the worker's own 300 s give-up and the head's went-silent window. Ray here is
played as Ray is: a node drained through Ray ends its raylet when it holds no work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetsim.agents import ContainerFault, Span
from fleetsim.harness import START, Fleet, fleet
from reconciler.model.records import InstanceRecord, Records
from tests.scenarios.world import M, Signals, cluster, ended_by, rented, run, workers

LOST_AFTER = 90  # seconds: under the 300 s of the worker's give-up and of went-silent
WATCHDOGS = {"lost_after_seconds": LOST_AFTER}
CUT = 3.5 * M  # marked lost within LOST_AFTER + one lost-net cadence; healed well before 270 s


@dataclass
class PlayedRay(Signals):
    """Ray as it behaves: a drain it accepts ends the node's raylet once the node is idle (here:
    at once when Ray holds no work on it), so the agent sees Ray exit. Every drain asked for is
    recorded in `drained` (record, how). `drain` is the lost-worker drain the controller used to
    ask for (issue 21 point 5); the controller no longer has it, it stays here so that this
    scenario shows what it did on the code before."""

    fleet: Fleet | None = None
    drained: list[tuple[str, str]] = field(default_factory=list)

    def drain(self, records: Records, record_ids: Sequence[str], reason: str) -> None:
        self._drained(records, record_ids, "drain")

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        answer = super().drain_idle(records, record_ids, deadline)
        accepted = [rid for rid, ok in (answer or {}).items() if ok]
        self._drained(records, accepted, "drain_idle")
        return answer

    def _drained(self, records: Records, record_ids: Sequence[str], how: str) -> None:
        work = self.work_at(self.clock.now(), records) if self.work_at else {}
        for record_id in record_ids:
            self.drained.append((record_id, how))
            record = records.instances.get(record_id)
            if self.fleet is None or record is None or record.vast_id is None:
                continue
            if not work.get(record_id, False):  # idle: the raylet exits
                fault = self.fleet.agents.fault(record.vast_id)
                exits = replace(fault, ray_exits_at=self.clock.now(), ray_exit_code=0)
                self.fleet.faults[record.vast_id] = exits


def record_of(f: Fleet, vast_id: int) -> InstanceRecord:
    return next(r for r in f.controller.records().instances.values() if r.vast_id == vast_id)


def cut_path(f: Fleet, victim: int, start: float, end: float) -> None:
    """Nothing from the container reaches the head, and vast hears nothing from its host, from
    `start` to `end`; the container, its Ray and its disk keep running throughout."""
    f.faults[victim] = replace(f.agents.fault(victim), head_unreachable=Span(start, end))
    f.sim.faults.unknown(victim, at=start)
    f.sim.faults.heard_again(victim, at=end)


@dataclass
class Watched:
    """What was seen of the victim while its path was cut."""

    lost: bool = False
    workers_while_lost: int = 0


def watch_victim(f: Fleet, victim: int, name: str, seen: Watched) -> None:
    if record_of(f, victim).lost:
        seen.lost = True
        seen.workers_while_lost = max(seen.workers_while_lost, len(workers(f, name)))


def assert_kept_serving(f: Fleet, victim: int, signals: PlayedRay, healed: float) -> None:
    """The same instance, on the same boot, heard by the head again with its own certificate:
    never drained, never refused, never destroyed."""
    agent = f.agent(victim)
    assert agent is not None
    refused = [at for at, status in agent.beats if status == 403]
    assert not refused, f"the healed worker's heartbeats were refused (403) at {refused}"
    assert agent.ray_gone_at is None, f"the lost worker's Ray ended at {agent.ray_gone_at}"
    assert agent.ending is None, f"the lost worker ended itself: {agent.ending}"
    assert victim in f.sim.instances, f"the lost worker was destroyed ({ended_by(f).get(victim)})"
    assert len(f.agents.boots[victim]) == 1  # the same container, never restarted
    assert (agent.last_heartbeat_success or 0) > healed  # its certificate is accepted again
    record = record_of(f, victim)
    assert record.live and not record.lost
    assert record.cert_serial not in f.controller.records().revoked_certs
    drained = [d for d in signals.drained if d[0] == record.id]
    assert not drained, f"the lost worker was drained through Ray: {drained}"
    assert victim not in ended_by(f)


def test_an_idle_lost_worker_whose_path_heals_keeps_serving_beside_its_replacement() -> None:
    """Idle in Ray's eyes (no tasks on it) but busy on its own: a drain would have ended it."""
    spec = cluster("healing", min_workers=1, max_workers=2, factor=1, watchdogs=WATCHDOGS)
    with fleet(spec) as f:
        signals = PlayedRay(f.clock, fleet=f)
        f.controller.signals = signals
        run(f, START + 10 * M)
        (victim,) = workers(f, "healing")
        cut = f.clock.now()
        cut_path(f, victim, cut, cut + CUT)
        seen = Watched()
        run(f, cut + CUT, each=lambda: watch_victim(f, victim, "healing", seen))
        assert seen.lost  # every channel was cold: marked lost, out of rotation
        assert len(rented(f, "healing")) == 2  # a replacement was rented for the demand
        run(f, cut + CUT + 10 * M)
        assert_kept_serving(f, victim, signals, cut + CUT)
        assert len(workers(f, "healing")) == 2  # both serve: at max_workers, nothing is ended


def test_a_busy_lost_worker_comes_back_as_capacity_and_its_replacement_is_the_surplus() -> None:
    """max_workers 1 counts workers that are not lost, so a replacement comes up while the busy
    worker is lost; once the path heals it is capacity again, and scale-down ends the surplus:
    the newest worker, quiet and holding no Ray work (the replacement), never the one holding
    work."""
    spec = cluster("busyheal", min_workers=1, max_workers=1, factor=1, watchdogs=WATCHDOGS)
    holding: set[int] = set()
    with fleet(spec) as f:
        signals = PlayedRay(
            f.clock,
            fleet=f,
            work_at=lambda now, records: {
                r.id: r.vast_id in holding for r in records.instances.values()
            },
        )
        f.controller.signals = signals
        run(f, START + 10 * M)
        (victim,) = workers(f, "busyheal")
        holding.add(victim)  # a long Ray job runs on it
        # the replacement to come is healthy and quiet: the surplus Ray would end
        f.agents.next_fault = lambda vast_id: ContainerFault(working=lambda now: False)
        run(f, START + 12 * M)
        cut = f.clock.now()
        cut_path(f, victim, cut, cut + CUT)
        seen = Watched()
        run(f, cut + CUT, each=lambda: watch_victim(f, victim, "busyheal", seen))
        assert seen.lost
        (replacement,) = set(rented(f, "busyheal")) - {victim}  # max_workers skips the lost one
        run(f, cut + CUT + 15 * M)
        assert_kept_serving(f, victim, signals, cut + CUT)
        assert workers(f, "busyheal") == {victim}  # back at max_workers, with the busy one
        assert ended_by(f).get(replacement) == "scale_down"
