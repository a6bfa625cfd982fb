"""The life cycle of a worker, timed, beside the first seed's live test on vast (2026-10-14).

How to run (from the repository root; it re-runs itself in a loopback-only network namespace,
which Ray needs on one machine, when it can)::

    .venv/bin/python bench/lifecycle.py

What it measures, on one machine with the real bootloader, agent, head services and Ray (the live
harness `bench/live.py`), with the tests' shrunken thresholds (heartbeat 2 s, went silent 12 s):

- rental -> enrolled, enrolled -> Ray node running, enrolled -> extra candidate destroyed;
- TERM to PID 1 -> report at the head, TERM -> gone at vast;
- heartbeats blocked at the head -> destroyed (against the went-silent threshold).

The seed's figures were measured on real vast hosts with the image in cache, and its heartbeat
block used the real 5-minute threshold: compare shapes and orders, not absolute values.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import Live, live_cluster
from tests.waiting import wait_for

SEED = {
    "rental -> enrolled": "26.7 s",
    "enrolled -> Ray node running": "7.9 s",
    "enrolled -> extra candidate destroyed": "8.6 s",
    "TERM -> report": "0.5 s",
    "TERM -> gone at vast": "<= 3.3 s",
    "heartbeat block -> destroyed": "308.9 s (limit 270-330 s)",
}


def loopback_only() -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return True
    return False


def _event(live: Live, cls: str, instance: int | None = None) -> float:
    for entry in live.ledger():
        if entry["class"] == cls and (instance is None or entry["instance"] == instance):
            return float(entry["time"])
    raise AssertionError(f"no {cls} in the ledger")


def measure(root: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    with live_cluster(root, min_workers=1, factor=2) as live:
        record, vast_id = wait_for(lambda: next(iter(live.workers().items()), None), 120)
        rented = live.records().instances[record].created_at
        enrolled = _event(live, "enrolled", vast_id)
        out["rental -> enrolled"] = enrolled - rented

        def node_up() -> float | None:
            alive = [
                n for n in live.ray_nodes() if n["alive"] and n["labels"].get("rv_record") == record
            ]
            return time.time() if alive else None

        out["enrolled -> Ray node running"] = wait_for(node_up, 60, every=0.05) - enrolled
        extra = next(
            e for e in live.ledger() if e["class"] == "extra_candidate" and e["kind"] == "outcome"
        )
        out["enrolled -> extra candidate destroyed"] = float(extra["time"]) - enrolled

        sent = time.time()
        live.sim.signal_from_inside(vast_id, signal.SIGTERM)
        wait_for(lambda: vast_id not in live.sim.instances, 30, every=0.05)
        out["TERM -> report"] = _event(live, "worker_report", vast_id) - sent
        out["TERM -> gone at vast"] = (live.sim.instance(vast_id).destroyed_at or 0) - sent  # type: ignore[union-attr]

        record, vast_id = wait_for(lambda: next(iter(live.workers().items()), None), 120)
        wait_for(lambda: live.records().instances[record].self_report_at, 30)
        live.head.stop_heartbeats()
        wait_for(lambda: vast_id not in live.sim.instances, 90, every=0.1)
        last = live.records().instances[record].self_report_at or 0.0
        destroyed = live.sim.instance(vast_id).destroyed_at or 0.0  # type: ignore[union-attr]
        out["heartbeat block -> destroyed"] = destroyed - last
    return out


def main() -> int:
    if not loopback_only():
        unshare = shutil.which("unshare")
        if os.environ.get("RV_LIFECYCLE_INNER") or unshare is None:
            print(
                "needs a loopback-only network namespace: run under `unshare -n`", file=sys.stderr
            )
            return 1
        inner = f"ip link set lo up && exec {sys.executable} {' '.join(sys.argv)}"
        env = {
            **os.environ,
            "RV_LIFECYCLE_INNER": "1",
            "PYTHONPATH": str(Path(__file__).parents[1]),
        }
        return subprocess.call([unshare, "-n", "--", "sh", "-c", inner], env=env)
    with tempfile.TemporaryDirectory(prefix="rv-life-") as tmp:
        figures = measure(Path(tmp))
    print(f"{'step':<40} {'here':>10}   {'seed (vast, 2026-10-14)':<28}")
    print("-" * 82)
    for step, value in figures.items():
        print(f"{step:<40} {value:>9.1f}s   {SEED[step]:<28}")
    print("(here: heartbeat 2 s, went silent after 12 s; seed: 30 s and 300 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
