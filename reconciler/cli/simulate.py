"""`ray-vast simulate`: the specs priced on virtual time, before renting anything.

The run is `python -m fleetsim` in its own process: it drives the agent and vastsim, which the
reconciler never imports (the layering check enforces it); this command only checks the specs
first and passes the output and the verdict through.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli import context
from reconciler.cli.options import JsonFlag, SpecDir


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast simulate examples/clusters --hours 24\n\n"
        "  ray-vast simulate clusters --seed 7 --failures rates.yaml --json\n\n"
        "A failure mix file gives weights of the fates a rental meets (stall, boot, dies, "
        "net_drop, idle, healthy) and orphans_per_day; what it leaves out is the fleet "
        "benchmark's. No account, no network: vastsim on virtual time."
    )
)
def simulate(
    spec_dir: SpecDir = Path("."),
    hours: Annotated[
        float, typer.Option("--hours", help="Simulated hours in which failures begin.", min=0.1)
    ] = 24.0,
    seed: Annotated[int, typer.Option("--seed", help="The scenario's seed.")] = 1,
    failures: Annotated[
        Path | None,
        typer.Option("--failures", help="A YAML failure mix (default: the fleet benchmark's)."),
    ] = None,
    as_json: JsonFlag = False,
    keep: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Keep the run's state and ledger in this new directory (for `ray-vast cost`, "
            "`ledger`, `state` with --state-dir). Default: not kept.",
        ),
    ] = None,
    no_scheduling: Annotated[
        bool,
        typer.Option(
            "--no-scheduling",
            help="Skip the comparison of `scheduling: ray` and `cheapest` (two more runs of "
            "the clusters where a node type's shape fits inside another's).",
        ),
    ] = False,
) -> None:
    """Price your specs before renting: ray-vast on virtual time against a failure mix.

    The whole engine (controller, heads, the agent's state machine in every container) runs on
    an in-process vastsim, with Ray's demand stepping between each node type's min and max
    workers; it prints dollars by cause, waste against the floor, false destroys and leaks,
    and what `scheduling: cheapest` would have saved where a node type's demand fits another.
    """
    context.specs(spec_dir, warn=True)
    argv = [sys.executable, "-m", "fleetsim", str(spec_dir), "--hours", f"{hours:g}"]
    argv += ["--seed", str(seed)]
    if failures is not None:
        argv += ["--failures", str(failures)]
    if as_json:
        argv.append("--json")
    if keep is not None:
        argv += ["--state-dir", str(keep)]
    if no_scheduling:
        argv.append("--no-scheduling")
    # its own process: the reconciler never imports the agent or vastsim, and this runs both
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.stdout:
        typer.echo(done.stdout, nl=False)
    if done.stderr:
        typer.echo(done.stderr, err=True, nl=False)
    raise typer.Exit(0 if done.returncode == 0 else 1)
