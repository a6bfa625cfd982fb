"""From Ray's demand to the first create call: how long a user waits before ray-vast rents.

The whole controller on virtual time (`bench.harness.fleet`: real planner, executor, heads and
agents against vastsim): a cluster sits at zero workers; at a random moment Ray starts asking for
one worker; the figure is the time from that moment to the first create call vastsim sees. Run
once with the controller reading Ray's demand every 2 s between reconciles (as `watch` and `up`
do when they read a Ray head), and once with demand read only at the 60-s reconcile (the first
build's behaviour). Ray's own autoscaler loop runs every 5 s.

    .venv/bin/python bench/demand.py [--trials 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import START, fleet
from reconciler.model.observation import NodeKey
from reconciler.spec.loader import load_texts
from vastsim.faults import CREATE_ROUTE

SPEC = """\
apiVersion: ray-vast/v1
kind: Cluster
metadata: {name: d}
spec:
  max_dollars_per_hour: 5
  node_types:
    gpu:
      min_workers: 0
      max_workers: 4
      candidate_factor: 1
      resources: {CPU: 2}
      image: rayproject/ray:2.60.0-py311-cu124
      disk_gb: 10
      offer:
        filters: {num_gpus: {eq: 1}}
"""


def first_create_after(seed: int, *, check: float | None) -> float:
    """Seconds from Ray's first demand to the first create call, for one trial."""
    (spec,) = load_texts([("d.yaml", SPEC)]).clusters
    rng = random.Random(f"demand:{seed}")
    with fleet(spec) as f:
        f.controller.demand_check_seconds = check
        f.advance(START + 120)  # settled: nothing wanted, nothing rented
        asked = f.clock.now() + rng.uniform(0, 60)
        want: dict[NodeKey, int] = {("d", "gpu"): 1}
        f.signals.demand_at = lambda now: want if now >= asked else {}
        f.advance(asked + 180)
        creates = [r.time for r in f.sim.requests if r.route == CREATE_ROUTE and r.time >= asked]
        if not creates:
            raise AssertionError("nothing was rented for the demand")
        return min(creates) - asked


def figures(trials: int, check: float | None) -> tuple[float, float, float]:
    waits = sorted(first_create_after(seed, check=check) for seed in range(trials))
    p95 = waits[min(len(waits) - 1, round(0.95 * (len(waits) - 1)))]
    return statistics.median(waits), p95, waits[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=30)
    args = parser.parse_args(argv)
    print("demand -> first create call (virtual time, the whole controller)")
    print(f"{'Ray read':34} {'p50':>7} {'p95':>7} {'max':>7}")
    for name, check in (
        ("every 2 s between reconciles", 2.0),
        ("at the 60-s reconcile only", None),
    ):
        p50, p95, worst = figures(args.trials, check)
        print(f"{name:34} {p50:6.1f}s {p95:6.1f}s {worst:6.1f}s")
    print("target: p95 <= 2 s after Ray first reports the demand (Ray's autoscaler loop: 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
