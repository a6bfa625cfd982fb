"""`scheduling: cheapest` through the whole controller (issue 25).

Two node types fit Ray's four pending one-GPU tasks: `one` (an RTX 4090 alone, {GPU: 1}) and
`quad` (four RTX 4090s on one machine, {GPU: 4}). Ray's own score launches one `quad` (it places
all four tasks at full utilisation); vastsim's market sells four single RTX 4090s for less than
its 4-GPU one ($0.29-0.38/h each against $1.52/h). With `scheduling: ray` (the default) the
controller rents Ray's choice; with `cheapest` it rents the singles, the ledger and `status` say
why in prices, and the cluster's bill is lower for the same four GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from fleetsim.harness import START, Fleet, fleet
from reconciler.model.demand import Demand, RayReport, ShapeCount
from reconciler.model.records import Role
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from reconciler.views import status, status_text
from tests.scenarios.world import IMAGE, M, Signals, ledger, run
from tests.specs import load_spec


def pick_text(scheduling: str | None) -> str:
    """The cluster: `one` and `quad` both fit a one-GPU task; unset `scheduling` is Ray's."""
    line = f"scheduling: {scheduling}\n    " if scheduling else ""
    return spec_yaml(
        "pick",
        f"""\
    max_dollars_per_hour: 20
    {line}node_types:
      one:
        min_workers: 0
        max_workers: 4
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 4090}}}}
        resources: {{GPU: 1}}
      quad:
        min_workers: 0
        max_workers: 2
        candidate_factor: 1
        image: {IMAGE}
        disk_gb: 10
        offer:
          filters: {{num_gpus: {{eq: 4}}, gpu_name: {{eq: RTX 4090}}}}
        resources: {{GPU: 4}}
    """,
    )


def pick(scheduling: str | None) -> ClusterSpec:
    return load_spec(pick_text(scheduling), "pick.yaml")


@dataclass
class FourGpuTasks(Signals):
    """Ray's head reports four pending one-GPU tasks, all along."""

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        self.read_clusters = tuple(specs)
        return {n: RayReport(Demand(tasks=(ShapeCount({"GPU": 1.0}, 4),))) for n in specs}


def serving(f: Fleet) -> list[tuple[str, float]]:
    records = f.controller.records().instances.values()
    return sorted((r.node_type, r.dph_total) for r in records if r.live and r.role is Role.WORKER)


@contextmanager
def rent_for_four_tasks(spec: ClusterSpec) -> Iterator[Fleet]:
    with fleet(spec) as f:
        f.controller.signals = FourGpuTasks(f.clock)
        run(f, START + 20 * M)
        yield f


def test_ray_rents_rays_choice_and_cheapest_the_cheaper_node_type() -> None:
    with rent_for_four_tasks(pick(None)) as f:
        by_ray = serving(f)
    with rent_for_four_tasks(pick("cheapest")) as f:
        by_price = serving(f)

    # Ray's score: one 4-GPU node for the four tasks, nothing else
    assert [t for t, _ in by_ray] == ["quad"]
    # by price: four single GPUs, which cost less together than the 4-GPU node
    assert [t for t, _ in by_price] == ["one"] * 4
    ray_dph, cheap_dph = sum(d for _, d in by_ray), sum(d for _, d in by_price)
    assert cheap_dph < ray_dph, (cheap_dph, ray_dph)


def test_the_ledger_and_status_say_which_node_type_was_chosen_and_at_what_price() -> None:
    spec = pick("cheapest")
    with rent_for_four_tasks(spec) as f:
        rents = [e["message"] for e in ledger(f) if e["class"] == "scale_up"]
        records = f.controller.records()
        lineage, now = f.controller.journal.lineage, f.clock.now()
    rents = [m for m in rents if m.startswith("rent: ")]
    assert rents and all("scheduling cheapest launched" in m for m in rents)
    assert "per request (1 on a $0.2921/h node) against quad $0.3805/h" in rents[0]
    assert "(Ray's score: quad)" in rents[0]

    view = status.build(records, [], [spec], lineage=lineage, serial=1, now=now, error=None)
    (cluster,) = view["clusters"]
    assert cluster["scheduling"] == "cheapest"
    (chosen,) = cluster["chosen"]
    assert chosen["node_type"] == "one" and "against quad" in chosen["why"]
    text = status_text.human(view)
    assert "  scheduling: cheapest" in text
    assert "  one: scheduling cheapest launched" in text
