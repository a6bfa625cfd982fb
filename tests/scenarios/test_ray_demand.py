"""Ray's demand, end to end through the controller on virtual time (issue 15).

- New unmet demand is seen between reconciles (Ray read every 2 s, no call to vast) and the first
  create call follows within seconds, not at the next 60-s reconcile.
- Demand that fits no node type rents nothing; it is said once per shape (the ledger, an alert
  in `status`), not once per tick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetsim.harness import START, fleet
from reconciler.model.demand import Demand, RayReport, ShapeCount
from reconciler.model.observation import NodeKey
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from tests.scenarios.world import H, M, Signals, alive, cluster, lines, rented, run, workers
from vastsim.faults import CREATE_ROUTE

SPEC = cluster("d", min_workers=0, max_workers=4, factor=1)


def test_new_demand_is_rented_for_within_seconds_not_at_the_next_reconcile() -> None:
    with fleet(SPEC) as f:
        f.controller.agenda.demand_check_seconds = 2.0
        run(f, START + 2 * M)  # a reconcile just ran: the next one is a minute away
        asked = f.clock.now() + 7.0
        want: dict[NodeKey, int] = {("d", "gpu"): 1}
        f.controller.signals = Signals(f.clock, demand_at=lambda now: want if now >= asked else {})
        run(f, asked + 30)
        creates = [r.time for r in f.sim.requests if r.route == CREATE_ROUTE]
        assert creates and asked <= min(creates) <= asked + 3.0
        assert len(rented(f, "d")) == 1


def test_without_the_demand_check_the_reconcile_cadence_decides() -> None:
    with fleet(SPEC) as f:
        run(f, START + 2 * M)
        asked = f.clock.now() + 7.0
        want: dict[NodeKey, int] = {("d", "gpu"): 1}
        f.controller.signals = Signals(f.clock, demand_at=lambda now: want if now >= asked else {})
        run(f, asked + 90)
        creates = [r.time for r in f.sim.requests if r.route == CREATE_ROUTE]
        assert creates and min(creates) > asked + 30  # the next 60-s reconcile


@dataclass
class Infeasible(Signals):
    """Ray asks for a shape no node type holds, for half an hour: a pending task of
    {CPU: 1, TPU: 1}, as Ray's head reports it; the planner's packing finds no node type."""

    until: float = 0.0

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        self.read_clusters = tuple(specs)
        if self.clock.now() >= self.until:
            return {name: RayReport() for name in specs}
        task = ShapeCount({"CPU": 1.0, "TPU": 1.0}, 1)
        return {name: RayReport(Demand(tasks=(task,))) for name in specs}


def test_infeasible_demand_rents_nothing_and_is_said_once_per_shape() -> None:
    with fleet(SPEC) as f:
        f.controller.agenda.demand_check_seconds = 2.0
        f.controller.signals = Infeasible(f.clock, until=START + 30 * M)
        run(f, START + 40 * M)
        assert rented(f, "d") == {}
        said = lines(f, "infeasible_demand")
        assert [e["message"] for e in said] == ["{CPU: 1, TPU: 1} fits no node type of d"]
        alerts = f.controller.records().alerts
        assert [a.message for a in alerts if a.cls == "infeasible_demand"] == [
            "{CPU: 1, TPU: 1} fits no node type of d"
        ]


@dataclass
class Draining(Signals):
    """Ray refuses to drain every node for idle termination until `accepts_from` (work landed
    after the pin was read), then drains them; it notes each request."""

    accepts_from: float = 0.0
    asked: list[tuple[float, str]] | None = None

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        now = self.clock.now()
        if self.asked is None:
            self.asked = []
        self.asked += [(now, rid) for rid in record_ids]
        return {rid: now >= self.accepts_from for rid in record_ids}


def test_an_idle_worker_is_drained_through_ray_before_its_end_and_a_refusal_means_busy() -> None:
    spec = cluster("q", min_workers=0, max_workers=2, factor=1)
    with fleet(spec, working=lambda now: False) as f:
        signals = Draining(
            f.clock,
            demand_at=lambda now: {("q", "gpu"): 1} if now < START + 15 * M else {},
            accepts_from=START + 1 * H,
        )
        f.controller.signals = signals
        run(f, START + 15 * M)
        (worker,) = workers(f, "q")
        run(f, START + 1 * H)
        # Ray refused every drain: the worker is not stopped, and no stop call went out
        assert workers(f, "q") == {worker}
        assert signals.asked, "the idle end never asked Ray to drain"
        assert not lines(f, "idle_stop", "call")
        run(f, START + 3 * H)
        # from the hour on, Ray drains it: the money chain ends it
        assert worker not in alive(f, "q")
        first_end = min(
            e["time"] for e in lines(f, "idle_stop", "call") + lines(f, "idle_destroy", "call")
        )
        assert first_end >= START + 1 * H
        assert any(at >= START + 1 * H for at, _ in signals.asked)
