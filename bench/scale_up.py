"""A big scale-up at vast's pace (issue 25): how long one tick takes to rent N machines.

vast allows one create every 4.5 s per account (`reference/vast-api.md`), so N creates take at
least `N x 4.5 s` (the floor). This runs the real controller, planner, executor and vast client
(pacing itself as against vast) against vastsim with vast's rate limits, on virtual time (a
day's wait costs nothing; the figure is vast's clock, not this machine's): a cluster whose
`min_workers` asks for N workers at once, one tick, and the times of its creates.

    .venv/bin/python -m bench.scale_up                    # 100 and 500 slots, factor 1 and 2
    .venv/bin/python -m bench.scale_up --slots 100 --factor 2

Printed per run: the creates, the tick's time against the floor, the calls by route (a search
or a listing between creates is time the floor does not have), and the time until the last slot
got its first candidate (with `candidate_factor: 2` a request of 100 slots is 200 creates: each
slot's first candidate should come before any slot's second). Heartbeats while a tick rents are
`bench/head_latency.py`'s (real TLS, real time).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fleetsim.harness import fleet
from reconciler.spec.loader import load_texts
from reconciler.vast.endpoints import VAST_THRESHOLDS
from tests.head.harness import market
from tests.scenarios.world import cluster_text, lines

VAST_CREATE_SECONDS = VAST_THRESHOLDS["asks"]  # vast's interval between two creates of one account
CREATE = "PUT /api/v0/asks/{id}/"
MAX_TICKS = 100


def create_floor(creates: int) -> float:
    """vast's least time from the first of `creates` creates to the last (one per interval)."""
    return max(0, creates - 1) * VAST_CREATE_SECONDS


@dataclass(frozen=True)
class Run:
    slots: int
    factor: int
    creates: int
    seconds: float  # from the first tick to the last create, on vast's clock
    last_slot_first: float  # until every slot had a candidate
    calls: dict[str, int]
    ticks: int

    @property
    def floor(self) -> float:
        """vast's least time for the creates until the last slot had a candidate."""
        return create_floor(self.slots)

    @property
    def ratio(self) -> float:
        return self.last_slot_first / self.floor if self.floor else 1.0


def deadline(slots: int, factor: int) -> int:
    """A provision deadline the request's creates fit in (the default, 1,800 s, unless more is
    needed): a request holds only the slots vast's pace can give candidates before its deadline
    (`scaling.paced`: 391 at 1,800 s), the rest waits for those to fill, and the containers here
    run no agent, so no slot ever fills; the figure is the pace of one request's creates."""
    return max(1800, math.ceil(slots * factor * 4.6 * 1.25))


def run(slots: int, factor: int) -> Run:
    # the breaker's canary would rent 3 slots of a configuration no worker has proven yet: the
    # benchmark is the scale-up of one it lets through (its slots above the request's)
    text = cluster_text(
        "big",
        min_workers=slots,
        max_workers=slots,
        factor=factor,
        cap=100_000.0,
        watchdogs={"provision_deadline_seconds": deadline(slots, factor)},
        head=f"breaker: {{slots: {slots * factor + 1}}}",
        # no agent in the containers: the rentals are the figure, and 500 agents heartbeating
        # on virtual time would make the run minutes of this machine's time
        node_extra={"agent": False},
    )
    spec = load_texts([("big.yaml", text)]).clusters[0]
    with fleet(
        spec, market=market(slots * factor + 20, price_scale=100_000), rate_limits=True
    ) as f:
        begun = f.clock.now()
        seen = len(f.sim.requests)
        ticks = 0
        rented: list[float] = []
        while ticks < MAX_TICKS and len(rented) < slots:  # until every slot has a candidate
            f.controller.tick()  # a search returns at most 100 offers: a tick rents as many
            ticks += 1
            rented = sorted(
                e["time"]
                for e in lines(f, "scale_up", "outcome")
                if e.get("outcome") == "ok" or e.get("data", {}).get("outcome") == "ok"
            )
            ended = f.clock.now()
            f.clock.sleep(max(0.0, f.controller.next_wakeup(ended)))  # as `watch` waits
        calls = Counter(r.route for r in f.sim.requests[seen:])
    last_first = rented[slots - 1] - begun if len(rented) >= slots else float("inf")
    return Run(slots, factor, calls[CREATE], ended - begun, last_first, dict(calls), ticks)


def table(runs: Sequence[Run]) -> str:
    head = (
        f"{'slots':>5}  {'factor':>6}  {'creates':>7}  {'ticks':>5}  {'took':>8}  {'floor':>8}  "
        f"{'ratio':>5}  "
        f"{'last slot first':>15}  calls besides creates"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        others = ", ".join(f"{k} {v}" for k, v in sorted(r.calls.items()) if k != CREATE)
        lines.append(
            f"{r.slots:>5}  {r.factor:>6}  {r.creates:>7}  {r.ticks:>5}  {r.seconds:>7.0f}s  "
            f"{r.floor:>7.0f}s  {r.ratio:>5.2f}  {r.last_slot_first:>14.0f}s  {others}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[Run]:
    logging.getLogger("ray.autoscaler.v2.scheduler").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--factor", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    runs = [run(n, k) for n in args.slots for k in args.factor]
    print("one tick renting N slots at vast's pace (virtual time, vast's rate limits)")
    print(table(runs))
    print(f"target: 100 slots within 1.1 x the floor (creates x {VAST_CREATE_SECONDS} s)")
    print("provision deadline per run: max(1800 s, creates x 4.6 s x 1.25), so one request holds")
    print("every slot (scaling.paced); 'last slot first': until each slot had its first candidate")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
