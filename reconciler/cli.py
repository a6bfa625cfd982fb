"""The `ray-vast` command: a thin shell that parses, builds dependencies, renders, and exits.

Nothing below this module reads the environment, the clock or the terminal by itself; commands
gather those here and pass them down, which is what lets tests drive every command in-process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler import __version__
from reconciler.spec.loader import load
from reconciler.views import diagnostics as diag_view

app = typer.Typer(
    name="ray-vast",
    help=(
        "Rent vast.ai machines as Ray workers, declaratively, and keep the bill safe.\n\n"
        "Cluster specs are YAML files in a directory (a Git repository); `plan` shows what would "
        "change, `apply` does it, `watch` keeps it so."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

SpecDir = Annotated[
    Path,
    typer.Argument(help="A directory of cluster specs (searched recursively) or one YAML file."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output (versioned).")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ray-vast {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Rent vast.ai machines as Ray workers, declaratively, and keep the bill safe."""


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast validate examples/clusters\n\n"
        "  ray-vast validate clusters/prod.yaml --json\n\n"
        "Exit status: 0 when every spec is valid, 1 when any is not."
    )
)
def validate(
    spec_dir: SpecDir = Path("."),
    as_json: JsonFlag = False,
) -> None:
    """Check cluster specs against the schema and the rules, without touching anything.

    Every problem is reported at once, each with file, line, column and field.
    """
    result = load(spec_dir)
    names = [c.name for c in result.clusters]
    if as_json:
        payload = diag_view.validate_json(result.diagnostics, names, result.files)
        typer.echo(json.dumps(payload, indent=2))
    else:
        diag_view.write_human(result.diagnostics, sys.stderr)
        summary = diag_view.validate_summary(result.diagnostics, names, result.files)
        typer.echo(summary, err=not result.ok)
    raise typer.Exit(0 if result.ok else 1)


def main() -> None:
    """Console-script entry point."""
    app()
