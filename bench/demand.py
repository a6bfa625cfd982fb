"""From Ray's demand to the first create call: how long a user waits before ray-vast rents.

The whole controller on virtual time (`fleetsim.harness.fleet`: real planner, executor, heads and
agents against vastsim): a cluster sits at zero workers; at a random moment Ray starts asking for
one worker; the figure is the time from that moment to the first create call vastsim sees. Run
once with the controller reading Ray's demand every 2 s between reconciles (as `watch` and `up`
do when they read a Ray head), and once with demand read only at the 60-s reconcile (the first
build's behaviour). Ray's own autoscaler loop runs every 5 s.

With `--real-ray N`, also N trials with real Ray: `ray-vast up` on a copy of local-sim.yaml
(min_workers 0, free ports); a driver submits one one-CPU task; the figure is the wall-clock time
from just before its `.remote()` to the first create call in the ledger. Ray binds 127.0.0.1 only
in a loopback-only network namespace, so run it under `unshare -n` (as `.ci/run` runs the e2e
tests):

    .venv/bin/python bench/demand.py [--trials 30] [--real-ray 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetsim.harness import START, fleet
from reconciler.model.observation import NodeKey
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml
from tests.e2e.upped import local_sim, running_up
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE

SPEC = spec_yaml(
    "d",
    """\
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
""",
)


def first_create_after(seed: int, *, check: float | None) -> float:
    """Seconds from Ray's first demand to the first create call, for one trial."""
    (spec,) = load_texts([("d.yaml", SPEC)]).clusters
    rng = random.Random(f"demand:{seed}")
    with fleet(spec) as f:
        f.controller.agenda.demand_check_seconds = check
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


DRIVER = textwrap.dedent(
    """
    import sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1)
    def one():
        return 1

    submitted = time.time()
    ref = one.remote()
    print("SUBMITTED", submitted, flush=True)
    ray.get(ref, timeout=600)
    """
)


def real_ray_wait(workdir: Path) -> float:
    """One trial with real Ray under `ray-vast up` (the e2e tests' `running_up`): seconds from a
    driver's submit to the first create call in the ledger."""
    spec = local_sim(min_workers=0)
    with running_up(workdir, [spec]) as up:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, up.address()],
            env=up.ray_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert driver.stdout is not None
            line = driver.stdout.readline()
            if not line.startswith("SUBMITTED "):
                raise AssertionError(f"the driver said {line!r}")
            submitted = float(line.split()[1])

            def first_create() -> float | None:
                for entry in up.ledger():
                    if entry["kind"] == "call" and entry["message"].startswith("create from"):
                        return float(entry["time"])
                return None

            created: float = wait_for(first_create, 120, every=0.2)
            return created - submitted
        finally:
            driver.kill()
            driver.wait()


def real_ray(trials: int) -> None:
    waits = []
    for _ in range(trials):
        with tempfile.TemporaryDirectory(prefix="rv-demand-") as workdir:
            waits.append(real_ray_wait(Path(workdir)))
    waits.sort()
    print(
        f"{'real Ray under up (submit -> create)':34} {statistics.median(waits):6.1f}s "
        f"{'':>7} {waits[-1]:6.1f}s   ({trials} trial(s))"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument(
        "--real-ray", type=int, default=0, metavar="N", help="also N trials with real Ray"
    )
    args = parser.parse_args(argv)
    print("demand -> first create call (virtual time, the whole controller)")
    print(f"{'Ray read':34} {'p50':>7} {'p95':>7} {'max':>7}")
    for name, check in (
        ("every 2 s between reconciles", 2.0),
        ("at the 60-s reconcile only", None),
    ):
        p50, p95, worst = figures(args.trials, check)
        print(f"{name:34} {p50:6.1f}s {p95:6.1f}s {worst:6.1f}s")
    if args.real_ray:
        real_ray(args.real_ray)
    print("target: p95 <= 2 s after Ray first reports the demand (Ray's autoscaler loop: 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
