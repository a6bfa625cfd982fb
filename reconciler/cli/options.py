"""The options and arguments several commands share, as typer reads them from a signature.

One declaration each, so `--state-dir` or `--lock-timeout` says the same thing in every command's
help; an option only one command has stays in that command's signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SpecDir = Annotated[
    Path,
    typer.Argument(help="A directory of cluster specs (searched recursively) or one YAML file."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output (versioned).")]
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where state.json, its lock and ledger.jsonl live. "
        "Default: $RAY_VAST_STATE_DIR, else .ray-vast/ in the working directory.",
    ),
]
LockTimeout = Annotated[
    float,
    typer.Option("--lock-timeout", help="Seconds to wait for the state lock.", min=0),
]
AutoApprove = Annotated[
    bool, typer.Option("--auto-approve", help="Do not ask for 'yes' before acting.")
]
MassDestroy = Annotated[
    bool,
    typer.Option(
        "--allow-mass-destroy",
        help="Allow a plan that destroys most of a cluster by policy (spec removed, "
        "max_workers cut, orphans).",
    ),
]
PinTarget = Annotated[
    str,
    typer.Argument(
        metavar="INSTANCE|RECORD",
        help="A vast instance id (digits, e.g. 20000001) or a record id (e.g. i12).",
    ),
]

# What the first SIGINT/SIGTERM does in watch and up, as they say it (a second exits at once).
TICK_FIRST_SIGNAL = "finishing the tick, then stopping; the state is saved"
