"""The commands that only read: `status`, `ledger`, `cost`, and `state list`/`show`/`force-unlock`.

None of them changes anything at vast (`status` lists it, the others do not call it); only
`state force-unlock` writes, and only the lock file, for the exact lock ID a refused command
printed. Rendering is in `reconciler/views`.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated

import typer

from reconciler import operations, stateadmin
from reconciler.cli import context
from reconciler.cli.options import JsonFlag, LockTimeout, StateDirOption
from reconciler.model import cost as cost_model
from reconciler.model.codec import encode
from reconciler.state.backend import parse
from reconciler.state.ledger import LedgerLineSkipped, LedgerQuery
from reconciler.views import ledger as ledger_view
from reconciler.views import state as state_view


@context.command(
    epilog=(
        "Examples:\n\n  ray-vast status\n\n  ray-vast status clusters --json\n\n"
        "Per instance: whether work holds it (`pinned: ray work`, `pinned by alice@box until "
        "14:05 UTC`); per cluster: alerts waiting for a person and paused node types."
    )
)
def status(
    spec_dir: Annotated[
        Path | None, typer.Argument(help="Specs, for caps and the provider URL.")
    ] = None,
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Clusters, their instances with phase, age, $/h and holds, alerts, breakers, the total."""
    specs = context.specs(spec_dir) if spec_dir else []
    deps = context.deps(state_dir)
    with context.reported(deps):
        code = operations.status(deps, specs, as_json=as_json)
    raise typer.Exit(code)


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast ledger --cluster local-sim --since 1h\n\n"
        "  ray-vast ledger --class went_silent --json\n\n"
        "  ray-vast ledger --instance 20000001"
    )
)
def ledger(
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    cls: Annotated[
        str | None, typer.Option("--class", help="Only this class (e.g. went_silent).")
    ] = None,
    instance: Annotated[
        int | None, typer.Option("--instance", help="Only this vast instance id.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="30m, 2h, 1d, an ISO time or epoch seconds.")
    ] = None,
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Every detection, decision, provider call and outcome, oldest first."""
    deps = context.deps(state_dir)
    with context.reported(deps):
        start = ledger_view.parse_since(since, deps.clock.now()) if since else None
        query = LedgerQuery(cluster=cluster, class_=cls, instance=instance, since=start)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LedgerLineSkipped)
            entries = list(deps.ledger_entries(query))
    context.say_skipped(caught)
    if as_json:
        for entry in entries:
            typer.echo(json.dumps(entry.to_json()))
        return
    typer.echo(ledger_view.human(entries), nl=False)


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast cost\n\n"
        "  ray-vast cost --since 1d --by node-type\n\n"
        "  ray-vast cost clusters --since 2026-09-01 --until 2026-09-08 --by cause --json\n\n"
        "Causes: serving; idle (quiet but kept: the idle timers armed); booting (rented, not "
        "serving yet); failed (ended without ever serving); extra_candidate; orphan; stopped "
        "(storage while stopped). Reads the state and the ledger; vast is not called."
    )
)
def cost(
    spec_dir: Annotated[
        Path | None, typer.Argument(help="Specs: only the clusters they declare.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From: 30m, 2h, 1d ago, an ISO time or epoch seconds."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="To (default now): 30m, 2h, 1d ago, an ISO time or epoch."),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Group by cluster, node-type, cause or instance.")
    ] = "cluster",
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Dollars the machines cost, at vast's per-second prices, by cause."""
    if by not in cost_model.BY_KEYS:
        typer.echo(f"Error: --by is one of {', '.join(cost_model.BY_KEYS)}", err=True)
        raise typer.Exit(1)
    specs = context.specs(spec_dir) if spec_dir else []
    deps = context.deps(state_dir)
    with context.reported(deps):
        now = deps.clock.now()
        start = ledger_view.parse_since(since, now) if since else None
        end = ledger_view.parse_since(until, now) if until else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LedgerLineSkipped)
            code = operations.cost(deps, specs, since=start, until=end, by=by, as_json=as_json)
    context.say_skipped(caught)
    raise typer.Exit(code)


@context.command(
    name="list", epilog="Examples:\n\n  ray-vast state list\n\n  ray-vast state list --json"
)
def state_list(state_dir: StateDirOption = None, as_json: JsonFlag = False) -> None:
    """One line per record: id, cluster, kind, phase."""
    deps = context.deps(state_dir)
    with context.reported(deps):
        records, lineage, serial = deps.read_records()
    view = state_view.build(records, lineage, serial)
    if as_json:
        typer.echo(json.dumps(view, indent=2))
        return
    typer.echo(state_view.human(view), nl=False)


@context.command(name="show", epilog="Examples:\n\n  ray-vast state show i12")
def state_show(
    record: Annotated[str, typer.Argument(help="A record id, as `state list` prints it.")],
    state_dir: StateDirOption = None,
) -> None:
    """Every field of one record, as JSON."""
    deps = context.deps(state_dir)
    with context.reported(deps):
        records, _, _ = deps.read_records()
    found = records.instances.get(record.removeprefix("instance.")) or records.requests.get(record)
    if found is None:
        typer.echo(f"Error: no record {record!r} in the state", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(encode(found), indent=2))


@context.command(
    name="force-unlock", epilog="Examples:\n\n  ray-vast state force-unlock 3f2a...  # the lock ID"
)
def state_force_unlock(
    lock_id: Annotated[str, typer.Argument(help="The lock ID printed by the refused command.")],
    state_dir: StateDirOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            "-force",
            help="Accepted for Terraform's spelling; force-unlock never asks (the ID is the "
            "confirmation).",
        ),
    ] = False,
) -> None:
    """Remove a lock left by a process that died. Never remove a live one."""
    del force  # nothing to skip: the exact lock ID is the confirmation
    deps = context.deps(state_dir)
    with context.reported(deps):
        holder = stateadmin.force_unlock(deps, lock_id)
    typer.echo(
        f"Lock {lock_id} removed (was held by {holder.info.who}, pid {holder.info.pid}); the"
        " ledger says who removed it."
    )


@context.command(
    name="migrate",
    epilog="Examples:\n\n  ray-vast state migrate file://.ray-vast sqlite:///var/lib/ray-vast/state.db"
    "\n  ray-vast state migrate sqlite:///var/lib/ray-vast/state.db postgresql://rv@db/ray_vast",
)
def state_migrate(
    source: Annotated[str, typer.Argument(metavar="FROM", help="The state URL to move from.")],
    target: Annotated[str, typer.Argument(metavar="TO", help="The empty state URL to move to.")],
    lock_timeout: LockTimeout = 0.0,
    state_dir: StateDirOption = None,
) -> None:
    """Move a state (lineage and serial kept) and its ledger into an empty store."""
    deps = context.deps(state_dir, lock_timeout)
    cwd = Path.cwd()
    with context.reported(deps):
        moved = stateadmin.migrate(deps, parse(source, cwd=cwd), parse(target, cwd=cwd))
    snapshot = moved.snapshot
    typer.echo(
        f"State lineage {snapshot.lineage} serial {snapshot.serial} and {moved.entries} ledger"
        f" line(s) moved to {parse(target, cwd=cwd).where}. The old store is left as it was:"
        " point RAY_VAST_STATE_URL (or --state) at the new one."
    )
