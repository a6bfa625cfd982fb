"""`ray-vast up` -> the first Ray worker, measured from outside (issue 24).

How to run (from the repository root, in a loopback-only network namespace as CI runs Ray)::

    unshare -n -- sh -c 'ip link set lo up && exec "$@"' sh \\
        .venv/bin/python -m bench.up_start --trials 5 [--baseline DIR]

Each trial starts `up` on the README's example in a fresh state directory and times, from the
moment `up` is started, until Ray's GCS has a live node of one of ray-vast's workers (its
`rv_record` label): the head (GCS, dashboard and Jobs API), the simulator, the rental, the
container's bootloader and agent, the enrollment and the worker's own `ray start`. The probe is
one GCS client in this process (a `ray status` subprocess every 2 s would take one of the two
cores from the start it measures). With
`--baseline DIR` (a checkout of another commit, e.g. `git worktree add /tmp/base HEAD~3`) the
trials alternate between that checkout and this one, so the machine's mood is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from tests.e2e.upped import EXAMPLE_RAY_PORT, ROOT, Spec, running_up
from tests.waiting import wait_for


def trial(tree: Path | None) -> float:
    """Seconds from starting `up` (of `tree`, or this checkout) to its first Ray worker."""
    with tempfile.TemporaryDirectory(prefix="rv-upstart-") as workdir:
        extra = {"PYTHONPATH": str(tree)} if tree is not None else {}
        example = (tree or ROOT) / "examples" / "clusters" / "local-sim.yaml"
        spec = Spec("local-sim", example.read_text(), EXAMPLE_RAY_PORT)
        started = time.monotonic()
        with running_up(Path(workdir), [spec], env_extra=extra, wait_heads=False) as up:
            wait_for(up.token().exists, 60, "up's Ray token", every=0.05)
            os.environ["RAY_AUTH_MODE"] = "token"
            os.environ["RAY_AUTH_TOKEN_PATH"] = str(up.token())
            # Ray caches the token it read: each trial's cluster has its own
            from ray._raylet import AuthenticationTokenLoader, GcsClient  # noqa: PLC0415

            AuthenticationTokenLoader.instance().reset_cache()
            gcs = GcsClient(address=up.address())

            def a_worker() -> bool:
                try:
                    nodes = gcs.get_all_node_info(timeout=1).values()
                except Exception:  # the GCS is not up yet: look again
                    return False
                return any("rv_record" in n.labels and n.state == 0 for n in nodes)

            wait_for(a_worker, 120, "a worker in Ray", every=0.05)
            took = time.monotonic() - started
            wait_for(partial(up.head_up, spec.name), 60, "the Ray head", every=0.5)
            return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None, metavar="DIR")
    args = parser.parse_args(argv)
    trees: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.baseline is not None:
        trees.insert(0, (f"baseline {args.baseline}", args.baseline.resolve()))
    times: dict[str, list[float]] = {name: [] for name, _ in trees}
    for _ in range(args.trials):
        for name, tree in trees:
            times[name].append(trial(tree))
    print("up -> first Ray worker (seconds, from outside)")
    for name, got in times.items():
        each = ", ".join(f"{t:.2f}" for t in got)
        print(f"  {name:36} median {statistics.median(got):5.2f}  max {max(got):5.2f}  ({each})")
    print("target: <= 6 s on this machine (issue 24)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
