"""Heartbeats at scale: the head's answer time as the fleet grows (issue 25, money at scale).

A served vastsim, the real `Controller` with its journal on the real file store, and the
cluster's real `HeadService` on real TLS ports (`bench/head_latency.py`'s world), with N serving
workers in the records. Heartbeats come as N workers send them (one each every 30 s: N / 30 a
second), over mutual TLS, from a process of their own (`bench/heartbeat_load.py`, an open load:
each is sent on its schedule whatever the head is doing). Printed per N: the rate, the answer
time from each heartbeat's scheduled moment (p50, p99, max), answers that were not 200, and the
state writes per heartbeat.

    .venv/bin/python -m bench.heartbeat_scale                       # 100 and 1,000 workers
    .venv/bin/python -m bench.heartbeat_scale --baseline REV        # and REV's head, same run

A worker gives up after 300 s without a heartbeat answered: a head whose answers queue up
behind its own state writes ends the fleet it serves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.baseline import checkout, run_there
from bench.head_latency import _beat, latency_world, percentile

ROOT = Path(__file__).resolve().parents[1]
INTERVAL = 30.0  # the agent's heartbeat interval (the seed's)


@dataclass(frozen=True)
class Row:
    workers: int
    rate: float
    sent: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    refused: int
    writes_per_beat: float


def measure(workers: int, seconds: float) -> Row:
    """N workers' heartbeats for `seconds` against a head whose records hold N workers."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        latency_world(Path(tmp), rentals=0, rate_limits=False, others=workers - 1) as world,
    ):
        journal = world.controller.journal
        serial = journal.serial
        rate = workers / INTERVAL
        params = {
            "port": world.service.endpoints.heartbeat_port,
            "ca_pem": world.service.app.pki.ca_pem,
            "cert_pem": world.worker.cert_pem.decode(),
            "key_pem": world.worker.key_pem.decode(),
            "body": _beat(world.worker_vast_id, 0),
            "rate": rate,
            "seconds": seconds,
        }
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "heartbeat_load.py")],
            input=json.dumps(params),
            capture_output=True,
            text=True,
            check=True,
        )
        writes = journal.serial - serial
    found = json.loads(done.stdout)
    ms = sorted(b[1] * 1000 for b in found["beats"])
    return Row(
        workers=workers,
        rate=rate,
        sent=found["sent"],
        p50_ms=statistics.median(ms),
        p99_ms=percentile(ms, 0.99),
        max_ms=ms[-1],
        refused=sum(1 for b in found["beats"] if b[2] != 200),
        writes_per_beat=writes / found["sent"],
    )


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'workers':>7}  {'beats/s':>7}  {'sent':>5}  {'p50':>9}  {'p99':>9}  {'max':>9}  "
        f"{'non-200':>7}  state writes per beat"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(
            f"{r.workers:>7,}  {r.rate:>7.1f}  {r.sent:>5}  {r.p50_ms:>7.1f}ms  {r.p99_ms:>7.1f}ms"
            f"  {r.max_ms:>7.1f}ms  {r.refused:>7}  {r.writes_per_beat:.2f}"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seconds", type=float, default=20.0, help="of heartbeats per size")
    parser.add_argument("--baseline", metavar="REV", help="also that commit's head, same run")
    parser.add_argument("--json", action="store_true", help="the rows as JSON only")
    args = parser.parse_args(argv)
    before: list[Row] = []
    if args.baseline:
        sizes = [str(n) for n in args.workers]
        with checkout(args.baseline) as tree:
            shown = run_there(
                tree,
                "bench/heartbeat_scale.py",
                ["--json", "--seconds", str(args.seconds), "--workers", *sizes],
            )
        before = [Row(**row) for row in shown]
    rows = [measure(n, args.seconds) for n in args.workers]
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
        return rows
    print(f"heartbeats of N workers (one each every {INTERVAL:.0f} s), {args.seconds:.0f} s each")
    print(table(rows))
    if before:
        print(f"at {args.baseline} (same run):")
        print(table(before))
    print("target: p99 <= 100 ms at 1,000 workers (a worker gives up after 300 s unanswered)")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
