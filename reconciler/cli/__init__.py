"""The `ray-vast` command: a thin shell that parses, builds dependencies, renders, and exits.

Nothing below this package reads the environment, the clock or the terminal by itself; commands
gather those (`context`) and pass them down, which is what lets tests drive every command
in-process. One module per family of commands, as Terraform's `internal/command` has one file per
command:

- `changes`: validate, plan, apply, down (what decides or makes a change at vast);
- `control`: up and watch (what keeps running);
- `inspect`: status, ledger, cost and `state list`/`show`/`force-unlock` (what only reads);
- `holds`: pin and unpin;
- `simulate`: simulate;
- `report`: report (a pipeline's status and comment on the forge);
- `options`: the options several commands share; `context`: what every command runs with;
  `interrupts`: SIGINT and SIGTERM in the long commands (apply, down, up, watch).

This module makes the typer apps and registers the commands, in the order `--help` lists them.

May import every layer (it composes them); nothing imports it.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from reconciler.cli import changes, context, control, holds, inspect, report, simulate

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
state_app = typer.Typer(
    help="Inspect the state and its lock; move it to another store.", no_args_is_help=True
)

COMMANDS: tuple[Callable[..., None], ...] = (
    changes.validate,
    changes.plan,
    changes.apply,
    changes.down,
    control.up,
    inspect.status,
    control.watch,
    inspect.ledger,
    inspect.cost,
    simulate.simulate,
    holds.pin,
    holds.unpin,
    report.report,
)
STATE_COMMANDS: tuple[Callable[..., None], ...] = (
    inspect.state_list,
    inspect.state_show,
    inspect.state_force_unlock,
    inspect.state_migrate,
)


def _register(into: typer.Typer, commands: tuple[Callable[..., None], ...]) -> None:
    for function in commands:
        name, epilog = context.MARKED[function]
        into.command(name, epilog=epilog)(function)


app.callback()(context.root)
_register(app, COMMANDS)
_register(state_app, STATE_COMMANDS)
app.add_typer(state_app, name="state")


def main() -> None:
    """Console-script entry point."""
    app()
