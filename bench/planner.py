"""How long the pure planner takes as a fleet grows (issue 9: "scale of the planner").

How to run (from the repository root)::

    .venv/bin/python -m bench.planner            # 1,000, 10,000, 100,000 instances, 200 clusters
    .venv/bin/python -m bench.planner --baseline HEAD~1   # and that commit's, in the same run
    .venv/bin/python -m bench.planner --quick    # a tiny run (what the smoke test uses)
    .venv/bin/python -m bench.planner --profile  # also cProfile the largest size

What it measures: the wall time of one `reconciler.planning.plan.plan(...)` call (the whole pure
decision core: refresh, listing checks, unfinished work, requests, scaling, orphan sweep, costing)
on realistic inputs (`bench/planner_world.py`: built the way a watch tick sees them), as the
median of several repetitions (`time.perf_counter`).

The figure to read is the time per instance and the ratio of the sizes against a linear fit: the
planner should scale linearly with the fleet (10x the time for 10x the instances; "vs linear" is
the time over the smallest size's time scaled by the size). The ratio is also the figure that
survives a noisy, shared machine, where absolute times wander by tens of percent; `--baseline REV`
measures that commit's planner on the same inputs in the same run (`bench/baseline.py`; its sizes
up to 10,000 only, as a quadratic planner would take minutes at 100,000).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import median

from bench.baseline import checkout, run_there
from bench.planner_world import LINEAGE, NOW, World, build_world
from reconciler.model.plan import Plan
from reconciler.planning.plan import plan
from reconciler.watch.logs import RAY_SCHEDULER_LOGGER

CLUSTERS = 200
SIZES = (1_000, 10_000, 100_000)
BASELINE_LARGEST = 10_000
QUICK_SIZES = (40, 200)
QUICK_CLUSTERS = 4
MIN_RUNS = 3
WARM_UP_SECONDS = 1.0


# --- measuring -----------------------------------------------------------------------------


def plan_once(world: World) -> Plan:
    return plan(world.specs, world.observation, world.records, lineage=LINEAGE, serial=1, now=NOW)


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


@dataclass(frozen=True)
class Row:
    instances: int
    clusters: int
    listing_rows: int
    actions: int
    runs: int
    seconds: float  # median of `runs`

    @property
    def us_per_instance(self) -> float:
        return self.seconds / self.instances * 1e6


def measure(instances: int, clusters: int, *, repeat: int, budget: float) -> Row:
    """The median of up to `repeat` timed calls: at least `MIN_RUNS`, fewer than `repeat` when
    one call is slow enough that `repeat` would overrun `budget` seconds. The first call checks
    that the planner accepted the inputs and warms the caches; a call that takes longer than
    `WARM_UP_SECONDS` needs no warm-up, so then it counts as a run and the benchmark stays short.
    """
    world = build_world(instances, clusters)
    start = time.perf_counter()
    result = plan_once(world)
    first = time.perf_counter() - start
    if result.errored:
        refused = "; ".join(e.text for e in result.errors)
        raise SystemExit(f"the planner refused the benchmark's inputs: {refused}")
    runs = max(min(repeat, MIN_RUNS), min(repeat, int(budget / max(first, 1e-6))))
    times = [first] if first > WARM_UP_SECONDS else []
    times += [timed(lambda: plan_once(world)) for _ in range(runs - len(times))]
    listing = world.observation.listing or ()
    return Row(world.instances, clusters, len(listing), len(result.actions), runs, median(times))


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'instances':>9}  {'clusters':>8}  {'listing':>7}  {'actions':>7}  {'runs':>4}  "
        f"{'median':>10}  {'per instance':>12}  {'vs linear':>9}"
    )
    lines = [head, "-" * len(head)]
    small = rows[0] if rows else None
    for r in rows:
        fit = r.seconds / (small.seconds * r.instances / small.instances) if small else 1.0
        lines.append(
            f"{r.instances:>9,}  {r.clusters:>8}  {r.listing_rows:>7,}  {r.actions:>7,}  "
            f"{r.runs:>4}  {r.seconds * 1e3:>8.1f}ms  {r.us_per_instance:>10.1f}us  {fit:>8.2f}x"
        )
    for large in rows[1:]:
        assert small is not None
        ratio = large.seconds / small.seconds
        size = large.instances / small.instances
        lines.append(
            f"ratio {large.instances:,}/{small.instances:,}: {ratio:.1f}x the time for "
            f"{size:.0f}x the instances (linear would be {size:.0f}x)"
        )
    return "\n".join(lines)


def versus(rows: Sequence[Row], before: Sequence[Row], rev: str) -> str:
    """This checkout's times beside the baseline's, size by size."""
    theirs = {r.instances: r for r in before}
    lines = [f"against {rev} (same inputs, same run):"]
    for r in rows:
        b = theirs.get(r.instances)
        if b is not None:
            lines.append(
                f"{r.instances:>9,}  {b.seconds * 1e3:>8.1f}ms -> {r.seconds * 1e3:>8.1f}ms  "
                f"({b.seconds / r.seconds:.1f}x faster)"
            )
    if len(before) >= 2:
        lines.append(
            f"{rev}: {before[-1].seconds / before[0].seconds:.1f}x the time for "
            f"{before[-1].instances / before[0].instances:.0f}x the instances"
        )
    return "\n".join(lines)


def profile(instances: int, clusters: int, top: int = 15) -> str:
    """The functions that take the time at one size, by cumulative time."""
    world = build_world(instances, clusters)
    profiler = cProfile.Profile()
    profiler.runcall(plan_once, world)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmark, print its table and return its rows (the smoke test reads them)."""
    # Ray's scheduler says at INFO every node min_workers keeps: thousands of lines a plan
    logging.getLogger(RAY_SCHEDULER_LOGGER).setLevel(logging.WARNING)
    args = _parser().parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    clusters = QUICK_CLUSTERS if args.quick else args.clusters
    repeat = 1 if args.quick else args.repeat
    before: list[Row] = []
    if args.baseline:
        small = [str(n) for n in sizes if n <= BASELINE_LARGEST]
        with checkout(args.baseline) as tree:
            shown = run_there(
                tree,
                "bench/planner.py",
                ["--json", "--clusters", str(clusters), "--repeat", str(repeat), "--sizes", *small],
            )
        before = [Row(**row) for row in shown]
    rows = [measure(n, clusters, repeat=repeat, budget=args.budget) for n in sizes]
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
        return rows
    print("planner: wall time of one plan() call (median of `runs`, time.perf_counter)")
    print(table(rows))
    if before:
        print(versus(rows, before, args.baseline))
    if args.profile:
        print(profile(sizes[-1], clusters))
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run, for the smoke test")
    parser.add_argument("--repeat", type=int, default=5, help="most timed runs per size")
    parser.add_argument(
        "--budget", type=float, default=10.0, help="seconds of timed runs per size (>= 3 runs)"
    )
    parser.add_argument("--clusters", type=int, default=CLUSTERS, help="clusters to spread over")
    parser.add_argument("--sizes", type=int, nargs="+", help="instances of each row")
    parser.add_argument("--baseline", metavar="REV", help="also that commit's planner")
    parser.add_argument("--json", action="store_true", help="the rows as JSON only")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    return parser


if __name__ == "__main__":
    main(sys.argv[1:])
