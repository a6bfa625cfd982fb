"""The $/h budget inside Ray's packing, and what Ray is told, through the whole controller
(issue 24).

The scripted Ray head reports what a real one does (pending tasks by shape, `RayReport`), and
the planner packs it with Ray's own scheduler within `max_dollars_per_hour`: the node Ray's
order takes first is bought first. Before, the packing ran without the budget and the launches
were then cut in spec order, so CPU work listed first took the money and the GPU task waited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fleetsim.harness import START, fleet
from reconciler.model.demand import Demand, RayReport, ShapeCount
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from tests.scenarios.world import IMAGE, M, Signals, cluster, rented, run
from tests.specs import load_spec

# `prep` is listed first: CPU work (its RTX 3060 hosts cost ~$0.06/h, GPU not advertised);
# `train` serves the GPU task and has CPUs to spare (its RTX 4090 hosts cost ~$0.30/h).
TWO_TYPES = spec_yaml(
    "mixed",
    f"""\
    max_dollars_per_hour: 0.33
    node_types:
      prep:
        min_workers: 0
        max_workers: 2
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 3060}}}}
        resources: {{CPU: 8, GPU: 0}}
      train:
        min_workers: 0
        max_workers: 2
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 4090}}}}
        resources: {{CPU: 8}}
    """,
)


@dataclass
class GpuAndCpuWork(Signals):
    """Ray's head reports one pending GPU task and two pending 8-CPU tasks, all along."""

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        self.read_clusters = tuple(specs)
        work = (ShapeCount({"GPU": 1.0}, 1), ShapeCount({"CPU": 8.0}, 2))
        return {name: RayReport(Demand(tasks=work)) for name in specs}


def node_types_rented(f: object, cluster: str) -> list[str]:
    records = f.controller.records().instances.values()  # type: ignore[attr-defined]
    ids = set(rented(f, cluster))  # type: ignore[arg-type]
    return sorted(r.node_type for r in records if r.vast_id in ids)


def test_a_budget_that_cannot_buy_all_of_rays_launches_buys_rays_first_node_first() -> None:
    """Ray's order takes a `train` node first (it serves the GPU task and one CPU task); the
    $0.33/h left after it cannot buy a `prep` node too, so `prep` leaves the pool. Cut in spec
    order, `prep` took the money first and the GPU task never got a machine."""
    spec = load_spec(TWO_TYPES, "mixed.yaml")
    with fleet(spec) as f:
        f.controller.signals = GpuAndCpuWork(f.clock)
        run(f, START + 15 * M)
        assert node_types_rented(f, "mixed") == ["train"]


def test_while_a_worker_is_rented_ray_is_told_it_is_pending_and_then_that_it_is_not() -> None:
    """Issue 24: ray-vast reports its launches to Ray as Ray's autoscaler does. A slot nobody
    rents for yet is a pending request; a machine rented whose Ray has not joined is a pending
    instance (its vast id); once its Ray serves, neither; a shape no node type holds is
    infeasible."""
    spec = cluster("told", min_workers=0, max_workers=2, factor=1)
    with fleet(spec) as f:
        signals = Signals(f.clock, demand_at=lambda now: {("told", "gpu"): 1})
        f.controller.signals = signals
        f.controller.agenda.demand_check_seconds = 2.0
        run(f, START + 20 * M)
        states = [s["told"] for _, s in signals.told if "told" in s]
        pending = [s for s in states if s.pending]
        assert pending, states[:5]
        (launch,) = pending[0].pending
        assert launch.node_type == "gpu" and int(launch.instance_id) in rented(f, "told")
        assert launch.details in {"renting at vast", "pulling the image", "booting the agent",
                                  "enrolled, starting Ray"}  # fmt: skip
        assert not states[-1].pending and not states[-1].requests  # the worker serves now
