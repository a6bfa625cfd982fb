"""`python -m fleetsim DIR [--hours H] [--seed S] [--failures FILE] [--json]`: what
`ray-vast simulate` runs (in its own process: the reconciler never imports the agent or vastsim,
and this runs both, on virtual time)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from fleetsim import report, savings
from fleetsim.mix import FLEET_MIX, MixError, read_mix
from fleetsim.simulate import Config, Result, simulate
from reconciler.spec.loader import load
from reconciler.views import diagnostics as diag_view


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    loaded = load(args.spec_dir)
    if not loaded.ok:
        diag_view.write_human(loaded.diagnostics, sys.stderr)
        sys.stderr.write(diag_view.validate_summary(loaded.diagnostics, [], loaded.files) + "\n")
        return 1
    if not loaded.clusters:
        sys.stderr.write(f"Error: no cluster spec in {args.spec_dir}\n")
        return 1
    mix = FLEET_MIX
    if args.failures is not None:
        try:
            mix = read_mix(Path(args.failures).read_text(encoding="utf-8"), str(args.failures))
        except OSError as exc:
            sys.stderr.write(f"Error: --failures {args.failures}: {exc.strerror or exc}\n")
            return 1
        except MixError as exc:
            sys.stderr.write(f"Error: {exc}\n")
            return 1
    if args.hours <= 0:
        sys.stderr.write("Error: --hours is more than zero\n")
        return 1
    config = Config(seed=args.seed, hours=args.hours, mix=mix)
    if args.state_dir is not None:
        problem = _unusable(args.state_dir)
        if problem:
            sys.stderr.write(f"Error: --state-dir {args.state_dir}: {problem}\n")
            return 1
        args.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Ray's scheduler says at INFO what it launches for min_workers: not a simulation's output
    logging.getLogger("ray.autoscaler.v2.scheduler").setLevel(logging.WARNING)
    result = simulate(loaded.clusters, config, state_dir=args.state_dir)
    compared = None if args.no_scheduling else savings.compare(loaded.clusters, config)
    _write(args, result, compared, config)
    return 0


def _write(
    args: argparse.Namespace, result: Result, compared: savings.Savings | None, config: Config
) -> None:
    """The run's report, in the form asked for."""
    source = str(args.spec_dir)
    mix_source = None if args.failures is None else str(args.failures)
    if args.json:
        doc = report.as_json(result, source=source, mix_source=mix_source)
        if not args.no_scheduling:
            doc["scheduling"] = report.savings_json(compared)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(report.human(result, source=source, mix_source=mix_source))
        if not args.no_scheduling:
            sys.stdout.write(report.savings_human(compared))
        if args.state_dir is not None:
            sys.stdout.write(report.kept(args.state_dir, config))


def _unusable(state_dir: Path) -> str | None:
    """Why a directory cannot take a simulated run's state (one already holds a state)."""
    if state_dir.exists() and not state_dir.is_dir():
        return "not a directory"
    if (state_dir / "state.json").exists() or (state_dir / "ledger.jsonl").exists():
        return "it already holds a state; give an empty or new directory"
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fleetsim", description=__doc__)
    parser.add_argument("spec_dir", type=Path)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--failures", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--no-scheduling", action="store_true")
    return parser


if __name__ == "__main__":
    sys.exit(main())
