"""The commands that hold a machine for a person, or let it go: `pin` and `unpin`.

They change only the state, never vast; while `watch` (or `up`) holds the state lock the order is
handed to it (`reconciler.handoff.pin`). Who holds a pin is recorded as `$USER@host`.
"""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from reconciler import handoff
from reconciler.cli import context
from reconciler.cli.options import LockTimeout, PinTarget, StateDirOption
from reconciler.model.orders import PinOrder
from reconciler.state.lock import Identity

_PIN_LOCK_NOTE = (
    "pin and unpin change only the state, never vast. While `ray-vast watch` (or `up`) runs it "
    "holds the state lock: the order is handed to it, and it takes it within a second."
)


def _who(env: dict[str, str]) -> str:
    """`$USER@host`: who a pin is recorded for (the lock's user, when $USER is not set)."""
    user = env.get("USER") or Identity.current().who.partition("@")[0]
    return f"{user}@{socket.gethostname()}"


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast pin 20000001 --for 2h\n\n"
        "  ray-vast pin i12 --reason 'eval run, ask alice'\n\n"
        "  ray-vast pin i12 --for 30m  # pinned already: the new pin replaces it\n\n"
        + _PIN_LOCK_NOTE
    )
)
def pin(
    target: PinTarget,
    for_: Annotated[
        str | None,
        typer.Option("--for", help="How long: 90s, 30m, 2h, 1d. Default: until `unpin`."),
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, kept with the pin and in the ledger.")
    ] = None,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Hold a machine: no watchdog, money-chain step or scale-down stops or destroys it.

    The pin lasts until --for runs out or `ray-vast unpin`. Vast is not called.
    """
    deps = context.deps(state_dir, lock_timeout)
    with context.reported(deps):
        seconds = handoff.parse_duration(for_) if for_ is not None else None
        order = PinOrder(target, _who(dict(deps.env)), reason, seconds)
        code = handoff.pin(deps, order)
    raise typer.Exit(code)


@context.command(
    epilog=("Examples:\n\n  ray-vast unpin 20000001\n\n  ray-vast unpin i12\n\n" + _PIN_LOCK_NOTE)
)
def unpin(
    target: PinTarget,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """End a person's pin; the watchdogs and the money chain may end the machine again.

    Ray's own hold (work on the node) is not a pin and stays while the work runs.
    """
    deps = context.deps(state_dir, lock_timeout)
    with context.reported(deps):
        order = PinOrder(target, _who(dict(deps.env)), unpin=True)
        code = handoff.pin(deps, order)
    raise typer.Exit(code)
