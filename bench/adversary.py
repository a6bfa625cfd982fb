"""The seeded adversary's bench (DESIGN.md 11, "Safety is searched for, not only listed").

    python -m bench.adversary --runs 200 --hours 6 --seed-start 1
    python -m bench.adversary --seed 17 --hours 6          # replay one seed, with its ledger lines

Each run draws a world from its seed (`fleetsim.adversary`), plays it into the whole controller on
virtual time and checks the invariants after every tick (`fleetsim.invariants`). Prints the seeds
tried, the simulated hours, the controller ticks (steps), the invariant checks made, each
counterexample (seed, invariant, the command that replays it) and the wall time. Exit status 1
when a counterexample was found.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence

from fleetsim.adversary_play import Outcome, report, run
from fleetsim.invariants import INVARIANTS


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.disable(logging.WARNING)
    if args.seed is not None:
        outcome = run(args.seed, args.hours)
        sys.stdout.write(report(outcome))
        sys.stdout.write(_totals([outcome], outcome.wall) + "\n")
        return 1 if outcome.violations else 0
    began = time.perf_counter()
    outcomes: list[Outcome] = []
    seeds = range(args.seed_start, args.seed_start + args.runs)
    for outcome in _played(seeds, args.hours, stop_at_first=not args.all, jobs=args.jobs):
        seed = outcome.seed
        outcomes.append(outcome)
        if outcome.violations:
            sys.stdout.write(_short(outcome) if args.brief else report(outcome))
        if args.progress:
            sys.stderr.write(f"seed {seed}: {outcome.wall:.1f}s, {outcome.rentals} rentals\n")
    sys.stdout.write(_totals(outcomes, time.perf_counter() - began) + "\n")
    return 1 if any(o.violations for o in outcomes) else 0


def _played(
    seeds: Sequence[int], hours: float, *, stop_at_first: bool, jobs: int
) -> Iterator[Outcome]:
    """Each seed's run, in seed order; on `jobs` processes (each run is one world on its own
    virtual clock, so they share nothing: a seed replays the same on one process or many)."""
    play = functools.partial(_one, hours=hours, stop_at_first=stop_at_first)
    if jobs <= 1:
        yield from map(play, seeds)
        return
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        yield from pool.map(play, seeds)


def _one(seed: int, *, hours: float, stop_at_first: bool) -> Outcome:
    logging.disable(logging.WARNING)
    return run(seed, hours, stop_at_first=stop_at_first)


def _short(outcome: Outcome) -> str:
    return "".join(
        f"seed {outcome.seed}: invariant {v.invariant} at {v.describe().splitlines()[0]}"
        f"\n  {v.what}\n  replay: {outcome.replay()}\n"
        for v in outcome.violations
    )


def _totals(outcomes: Sequence[Outcome], wall: float) -> str:
    found = [(o.seed, v.invariant) for o in outcomes for v in o.violations]
    by = {i: sorted({s for s, k in found if k == i}) for i in INVARIANTS}
    lines = [
        f"seeds tried: {len(outcomes)} ({outcomes[0].seed}..{outcomes[-1].seed})"
        if outcomes
        else "seeds tried: 0",
        f"simulated hours: {sum(o.hours for o in outcomes):g}",
        f"steps (controller ticks): {sum(o.ticks for o in outcomes)}",
        f"rentals: {sum(o.rentals for o in outcomes)}",
        f"invariant checks: {sum(o.checks for o in outcomes)}",
        f"counterexamples: {len(found)} in {len({s for s, _ in found})} seed(s)",
    ]
    lines += [f"  invariant {i} ({INVARIANTS[i]}): seeds {s}" for i, s in by.items() if s]
    per = wall / len(outcomes) if outcomes else 0.0
    lines.append(f"wall time: {wall:.1f} s ({per:.2f} s per run)")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.adversary", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--seed-start", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="replay this one seed")
    parser.add_argument(
        "--all", action="store_true", help="go on after a seed's first counterexample"
    )
    parser.add_argument("--brief", action="store_true", help="one line per counterexample")
    parser.add_argument("--progress", action="store_true", help="each seed's time on stderr")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)"
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
