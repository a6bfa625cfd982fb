"""`ray-vast report`: what a pipeline's job tells the forge (reconciler/forge.py).

`--plan FILE` on a pull request: the status `ray-vast/plan` on its head commit and one sticky
comment with the plan; `--applied CODE` on the merge: `ray-vast/apply` on the merge commit, from
the exit code of `apply --reviewed` (0 applied, 3 stale, else failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reconciler import forge, planfile
from reconciler.cli import context
from reconciler.cli.options import StateDirOption
from reconciler.views import plan as plan_view


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast report --plan ray-vast.plan     # pull request (GitHub Actions)\n\n"
        '  ray-vast report --applied "$code"        # merge, after apply --reviewed'
    )
)
def report(
    plan: Annotated[
        Path | None, typer.Option("--plan", help="A saved plan to report on the pull request.")
    ] = None,
    applied: Annotated[
        int | None,
        typer.Option("--applied", metavar="CODE", help="The exit code of `apply --reviewed`."),
    ] = None,
    state_dir: StateDirOption = None,
) -> None:
    """Report a plan or an apply to the forge: a commit status and one sticky comment."""
    if (plan is None) == (applied is None):
        typer.echo("Error: give exactly one of --plan FILE and --applied CODE.", err=True)
        raise typer.Exit(1)
    deps = context.deps(state_dir)
    with context.reported(deps):
        where = forge.Forge.from_env(deps.env)
        if plan is not None:
            said = _plan(where, plan, deps.state_url.workspace if deps.state_url else "")
        else:
            assert applied is not None
            state, description = forge.apply_status(applied)
            where.status(where.sha, "ray-vast/apply", state, description)
            said = f"ray-vast/apply: {state} on {where.sha[:12]}"
    typer.echo(said)


def _plan(where: forge.Forge, path: Path, workspace: str) -> str:
    saved = planfile.read(path)
    summary = plan_view.summary(saved.plan)
    state = "failure" if saved.plan.errored else "success"
    where.status(where.head, "ray-vast/plan", state, summary)
    marker = forge.MARKER.format(workspace=f" {workspace}" if workspace else "")
    done = where.sticky_comment(marker, forge.comment_text(plan_view.human(saved.plan), summary))
    return f"ray-vast/plan: {state} on {where.head[:12]}; plan comment {done}"
