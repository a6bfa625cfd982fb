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
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import free_port
from fleetsim.harness import START, fleet
from reconciler.model.observation import NodeKey
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml
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


ROOT = Path(__file__).resolve().parents[1]
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
    """One trial with real Ray under `ray-vast up`: seconds from a driver's submit to the first
    create call in the ledger."""
    ray_port = free_port()
    text = (
        (ROOT / "examples" / "clusters" / "local-sim.yaml")
        .read_text()
        .replace("min_workers: 1 ", "min_workers: 0 ")
        .replace("ray_port: 6380", f"ray_port: {ray_port}")
        .replace("enroll_port: 18443", f"enroll_port: {free_port()}")
        .replace("heartbeat_port: 18444", f"heartbeat_port: {free_port()}")
        .replace("metrics_port: 19464", f"metrics_port: {free_port()}")
    )
    spec, state = workdir / "local-sim.yaml", workdir / "state"
    spec.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAST_", "RAY_", "CUDA_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    token = state / "pki" / "local-sim" / "ray-auth-token"
    ray_env = {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    address = f"127.0.0.1:{ray_port}"
    ray = str(Path(sys.executable).with_name("ray"))
    cli = [sys.executable, "-m", "reconciler"]
    with (workdir / "up.log").open("w") as log:
        up = subprocess.Popen(
            [*cli, "up", str(spec), "--state-dir", str(state)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    driver: subprocess.Popen[str] | None = None
    try:

        def head_up() -> bool:
            if not token.exists():
                return False
            status = [ray, "status", "--address", address]
            shown = subprocess.run(
                status, env=ray_env, capture_output=True, timeout=60, check=False
            )
            return shown.returncode == 0

        wait_for(head_up, 180, every=2)
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER, address],
            env=ray_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert driver.stdout is not None
        line = driver.stdout.readline()
        if not line.startswith("SUBMITTED "):
            raise AssertionError(f"the driver said {line!r}")
        submitted = float(line.split()[1])

        def first_create() -> float | None:
            ledger = state / "ledger.jsonl"
            lines = ledger.read_text().splitlines() if ledger.exists() else []
            for entry in (json.loads(x) for x in lines if x.strip()):
                if entry["kind"] == "call" and entry["message"].startswith("create from"):
                    return float(entry["time"])
            return None

        created: float = wait_for(first_create, 120, every=0.2)
        return created - submitted
    finally:
        if driver is not None:
            driver.kill()
            driver.wait()
        up.terminate()
        up.wait(timeout=60)
        down = [*cli, "down", "local-sim", "--auto-approve", "--state-dir", str(state)]
        subprocess.run(down, cwd=ROOT, env=env, capture_output=True, timeout=180, check=False)


def real_ray(trials: int) -> None:
    waits = []
    for _ in range(trials):
        with tempfile.TemporaryDirectory(prefix="rv-demand-") as workdir:
            waits.append(real_ray_wait(Path(workdir)))
            time.sleep(1)
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
