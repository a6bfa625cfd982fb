"""What every command runs with: its dependencies, its specs, and the one way it fails cleanly.

A command builds its `Deps` here (`deps`: the only reading of the environment, the clock and the
terminal), loads its specs here (`specs`: a bad spec exits 1 with every diagnostic, before
anything is touched), and runs its work inside `reported`, which turns a `RayVastError` into one
line and exit status 1. Only that root: anything else is a bug and keeps its traceback.

`command` marks a function as a command with its help epilog, so the epilog stays beside the
function while `cli/__init__` registers every command in the order `--help` lists them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from reconciler import __version__
from reconciler import up as up_mod
from reconciler.clock import SystemClock
from reconciler.deps import Deps, never, state_dir_from
from reconciler.errors import InputError, RayVastError
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load
from reconciler.state.backend import URL_VARIABLE, StateURL, parse
from reconciler.state.ledger import LedgerLineSkipped
from reconciler.views import diagnostics as diag_view

Command = TypeVar("Command", bound=Callable[..., None])

# Each marked command's name (None: the function's, as typer makes it) and epilog.
MARKED: dict[Callable[..., None], tuple[str | None, str]] = {}


def command(epilog: str, *, name: str | None = None) -> Callable[[Command], Command]:
    """Marks `function` as a command with `epilog`; `cli/__init__` registers it."""

    def mark(function: Command) -> Command:
        MARKED[function] = (name, epilog)
        return function

    return mark


def print_version(value: bool) -> None:
    if value:
        typer.echo(f"ray-vast {__version__}")
        raise typer.Exit(0)


# The `--state URL` of this invocation (the root callback runs first, every time).
_chosen_state: list[str | None] = [None]


def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            metavar="URL",
            help="Where the state lives: sqlite:///path/state.db, postgresql://user@host/db "
            "(?workspace=NAME picks one of several), or file:///dir. Default: "
            "$RAY_VAST_STATE_URL, else the files of --state-dir.",
        ),
    ] = None,
) -> None:
    """Rent vast.ai machines as Ray workers, declaratively, and keep the bill safe."""
    _chosen_state[0] = state


def state_url(env: Mapping[str, str], cwd: Path) -> StateURL | None:
    """`--state`, else RAY_VAST_STATE_URL, parsed; a bad one ends the command with exit 1."""
    text = _chosen_state[0] or env.get(URL_VARIABLE)
    if not text:
        return None
    try:
        return parse(text, cwd=cwd)
    except InputError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None


def deps(
    state_dir: Path | None,
    lock_timeout: float = 0.0,
    *,
    stop_requested: Callable[[], bool] = never,
) -> Deps:
    """The dependencies of a command; with the embedded simulator's address when `up` runs one
    for this state directory (and VAST_URL does not say otherwise). `stop_requested`: the
    command's `Interrupts` (a long command), else nothing ever asks it to stop."""
    env = dict(os.environ)
    url = state_url(env, Path.cwd())
    local = url.path if url is not None and url.kind == "file" and state_dir is None else state_dir
    built = Deps(
        clock=SystemClock(),
        env=env,
        state_dir=state_dir_from(local, env, Path.cwd()),
        state_url=url,
        out=sys.stdout,
        err=sys.stderr,
        interactive=sys.stdin.isatty(),
        ask=input,
        lock_timeout=lock_timeout,
        stop_requested=stop_requested,
    )
    return built if "VAST_URL" in env else up_mod.with_embedded(built)


def specs(path: Path, *, warn: bool = False) -> list[ClusterSpec]:
    """Load specs or exit 1 with every diagnostic; nothing is touched on a bad spec. `warn`:
    the warnings of specs that load are said too (on stderr, as `validate` says them)."""
    result = load(path)
    if not result.ok:
        diag_view.write_human(result.diagnostics, sys.stderr)
        typer.echo(diag_view.validate_summary(result.diagnostics, [], result.files), err=True)
        raise typer.Exit(1)
    if warn:
        diag_view.write_human(result.diagnostics, sys.stderr)
    return list(result.clusters)


@contextlib.contextmanager
def reported(deps: Deps) -> Iterator[None]:
    """A `RayVastError` becomes one clear message and exit status 1, never a traceback; any other
    exception is a bug and propagates with its traceback. The vast clients the command opened
    are closed however it ends."""
    try:
        yield
    except RayVastError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    finally:
        deps.close()


def say_skipped(caught: list[warnings.WarningMessage]) -> None:
    """Ledger lines that could not be read, said once each on stderr; other warnings as ever."""
    for warning in caught:
        if issubclass(warning.category, LedgerLineSkipped):
            typer.echo(f"Warning: {warning.message}", err=True)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
