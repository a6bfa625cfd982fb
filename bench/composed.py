"""Two failure classes that only the composed controller shows: a broken image and two clusters.

Printed by `bench/fleet.py` beside its table (issue 12), and runnable alone::

    .venv/bin/python bench/composed.py

- broken image: an image whose PID 1 never starts the agent, on every host, for an hour, while
  Ray wants 2 workers; then a fixed image. What counts is how many machines are rented per 10
  minutes of failure: the seed's rent-loop breaker stops new launches after `breaker.slots`
  slots in a row ended with no worker, so at most `breaker.slots x candidate_factor` rentals (for
  requests of at most `breaker.slots` slots: a request of n slots rents its n x factor candidates
  before any of its slots can fail). The first build rented 9 in 4 minutes and never paused.
- two clusters: two clusters in one controller, each with its own demand, every worker busy all
  the time; a third cluster is added after an hour, the first one's spec is edited after two and
  the third removed after three. Any machine of the first two ended for another reason than a
  host fault the seed's table ends (the market's IP changes, exits) is a false destroy (the first
  build's planner destroyed the other cluster's healthy workers at every reconcile that did not
  name it).

Everything runs on virtual time through `fleetsim.harness` (real planner, nets, executor, heads,
ledger, the agent's state machine in every container); the figures are deterministic.
"""

from __future__ import annotations

import itertools
import json
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/composed.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetsim.agents import ContainerFault, Image
from fleetsim.harness import START, fleet
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml

H = 3600.0
M = 60.0
IMAGE = "rayproject/ray:2.60.0-py311-cpu"


def spec(name: str, *, min_workers: int = 0, max_workers: int = 4, factor: int = 2) -> ClusterSpec:
    text = spec_yaml(
        name,
        f"""\
        max_dollars_per_hour: 10
        node_types:
          gpu:
            min_workers: {min_workers}
            max_workers: {max_workers}
            candidate_factor: {factor}
            image: {IMAGE}
            disk_gb: 10
            offer:
              filters: {{num_gpus: {{eq: 1}}}}
        """,
    )
    return load_texts([(f"{name}.yaml", text)]).clusters[0]


@dataclass(frozen=True)
class BrokenImage:
    wanted: int
    rentals_in_failure: int
    max_per_cycle: int
    bound: int
    pauses: int
    workers_after_fix: int
    dollars: float


def broken_image(*, failure_hours: float = 1.0, wanted: int = 2) -> BrokenImage:
    """`wanted` workers asked for by Ray while the image is broken: the canary rule bounds a
    breaker cycle (from one opening to the next) at `slots x factor` rentals whatever it is."""
    cluster = spec("broken", factor=2, max_workers=max(4, wanted))
    fixed_at = START + failure_hours * H

    def fault(vast_id: int) -> ContainerFault:
        return ContainerFault(image=Image.IDLES) if _now[0] < fixed_at else ContainerFault()

    _now = [START]
    with fleet(cluster, faults=fault) as f:
        f.signals.demand_at = lambda now: {("broken", "gpu"): wanted}
        while f.clock.now() < fixed_at + 40 * M:
            _now[0] = f.clock.now()
            f.advance(f.clock.now() + 15)
        times = sorted(t for t in f.rentals().values() if t < fixed_at)
        opened = [
            float(json.loads(e)["time"])
            for e in f.ledger.read_text().splitlines()
            if '"class": "breaker_open"' in e and '"kind": "decision"' in e
        ]
        edges = [float("-inf"), *opened, fixed_at]
        cycles = [sum(1 for t in times if a <= t < b) for a, b in itertools.pairwise(edges)]
        pauses = len(opened)
        workers = sum(
            1
            for r in f.controller.records().instances.values()
            if r.live and r.role.value == "worker" and r.intent.value == "running"
        )
        return BrokenImage(
            wanted=wanted,
            rentals_in_failure=len(times),
            max_per_cycle=max(cycles),
            bound=cluster.breaker.slots * cluster.node_types["gpu"].candidate_factor,
            pauses=pauses,
            workers_after_fix=workers,
            dollars=sum(f.sim.meter.instance(i) for i in f.rentals()),
        )


# The market's own host faults, which the seed's table ends (not false destroys).
HOST_FAULTS = ("public_ip_changed", "exited", "create_failed")


@dataclass(frozen=True)
class TwoClusters:
    workers: dict[str, int]
    false_destroys: int
    host_faults: int
    removed_pruned: bool
    rentals: int


def two_clusters() -> TwoClusters:
    a, b, c = spec("a", min_workers=2), spec("b", min_workers=3), spec("c", min_workers=1)
    with fleet([a, b, c], working=lambda now: True) as f:
        f.controller.set_specs({"a": a, "b": b})
        f.advance(START + 1 * H)
        f.controller.set_specs({"a": a, "b": b, "c": c})
        f.advance(START + 2 * H)
        edited = spec("a", min_workers=2, max_workers=5)
        f.controller.set_specs({"a": edited, "b": b, "c": c})
        f.advance(START + 3 * H)
        # c's file is removed and pruned: all of a cluster needs a person's yes (the guard)
        f.controller.allow_mass_destroy = True
        f.controller.set_specs({"a": edited, "b": b})
        f.advance(START + 4 * H)
        records = f.controller.records().instances.values()
        live = {
            name: sum(
                1 for r in records if r.cluster == name and r.live and r.role.value == "worker"
            )
            for name in ("a", "b", "c")
        }
        ended = [r for r in records if r.cluster in ("a", "b") and not r.live]
        false = sum(1 for r in ended if r.ended_reason not in ("extra_candidate", *HOST_FAULTS))
        faults = sum(1 for r in ended if r.ended_reason in HOST_FAULTS)
        return TwoClusters(live, false, faults, live["c"] == 0, len(f.rentals()))


def _broken_line(broken: BrokenImage) -> str:
    ok = "ok" if broken.max_per_cycle <= broken.bound else "OVER"
    return (
        f"broken image (1 h, Ray wants {broken.wanted}): "
        f"{broken.rentals_in_failure} rentals, at most {broken.max_per_cycle} per breaker cycle "
        f"(bound: breaker slots x factor = {broken.bound}, {ok}); "
        f"{broken.pauses} breaker pauses; {broken.workers_after_fix} workers 40 min after "
        f"the fix; ${broken.dollars:.2f} billed"
    )


def report() -> str:
    two = two_clusters()
    return "\n".join(
        [
            _broken_line(broken_image(wanted=2)),
            _broken_line(broken_image(wanted=8)),
            "two clusters (one added, one edited, one removed, all busy, 4 h): "
            f"{two.false_destroys} false destroys ({two.host_faults} host faults ended by the "
            f"seed's table); workers a={two.workers['a']} "
            f"b={two.workers['b']} c={two.workers['c']} "
            f"(removed c pruned: {'yes' if two.removed_pruned else 'no'}); "
            f"{two.rentals} rentals",
        ]
    )


if __name__ == "__main__":
    print(report())
