"""The commands that decide or make a change at vast: `validate`, `plan`, `apply`, `down`.

Each parses its arguments, loads its specs and hands over to `reconciler.operations`, which does
the work; a saved plan (`apply FILE`) is applied exactly or refused as stale, as Terraform does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler import downing, handoff, operations, planfile, reviewing
from reconciler import up as up_mod
from reconciler.cli import context
from reconciler.cli.interrupts import Interrupts
from reconciler.cli.options import (
    AutoApprove,
    JsonFlag,
    LockTimeout,
    MassDestroy,
    SpecDir,
    StateDirOption,
)
from reconciler.spec.loader import load
from reconciler.state.errors import StateLockedError
from reconciler.views import diagnostics as diag_view


@context.command(
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


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast plan examples/clusters\n\n"
        "  ray-vast plan clusters -out ci.plan --json --detailed-exitcode\n\n"
        "  ray-vast plan clusters -out pr.plan --review   # on a pull request\n\n"
        "Exit status: 0 success (with --detailed-exitcode: no changes), 1 error, "
        "2 changes (with --detailed-exitcode)."
    )
)
def plan(
    spec_dir: SpecDir = Path("."),
    out: Annotated[
        Path | None, typer.Option("-out", "--out", help="Save the plan for `apply FILE`.")
    ] = None,
    as_json: JsonFlag = False,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 2 when there are changes.")
    ] = False,
    review: Annotated[
        bool,
        typer.Option(
            "--review",
            help="Also store the saved plan (-out) in the state, as the reviewed plan of the "
            "spec directory's git tree at HEAD: the merge applies it with `apply --reviewed`.",
        ),
    ] = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Show what would be rented, stopped and destroyed, and what it does to $/h.

    Compares the specs with vast's live listing and the state file; changes nothing at vast.
    """
    if review and out is None:
        typer.echo("Error: --review stores the saved plan: give -out FILE too.", err=True)
        raise typer.Exit(1)
    specs = context.specs(spec_dir, warn=True)
    deps = context.deps(state_dir, lock_timeout)
    with context.reported(deps):
        if review:
            reviewing.spec_tree(spec_dir)  # in git and committed, or refused before planning
        outcome = operations.make_plan(
            deps,
            specs,
            spec_path=spec_dir.resolve(),
            out_file=out,
            as_json=as_json,
            detailed=detailed_exitcode,
        )
        if review and out is not None and outcome.exit_code != operations.EXIT_ERROR:
            tree = reviewing.keep(deps, spec_dir, out)
            typer.echo(
                f"Stored as the reviewed plan of {spec_dir} at commit {tree.commit[:12]} (tree"
                f" {tree.tree[:12]}): a merge whose {spec_dir} is this tree applies exactly it"
                f" (`ray-vast apply --reviewed {spec_dir}`).",
                err=as_json,
            )
    raise typer.Exit(outcome.exit_code)


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast apply examples/clusters\n\n"
        "  ray-vast apply ci.plan\n\n"
        "  ray-vast apply clusters --auto-approve\n\n"
        "  ray-vast apply --reviewed clusters   # on the merge, in CI\n\n"
        "A saved or reviewed plan is applied exactly, or refused as stale (exit 3)."
    )
)
def apply(
    target: Annotated[
        Path, typer.Argument(help="A spec directory or YAML file, or a plan file from -out.")
    ] = Path("."),
    auto_approve: AutoApprove = False,
    allow_mass_destroy: MassDestroy = False,
    reviewed: Annotated[
        Path | None,
        typer.Option(
            "--reviewed",
            metavar="SPEC_DIR",
            help="Apply exactly the plan stored by `plan --review` for SPEC_DIR's git tree at "
            "HEAD, or exit 3 (stale: no such plan, applied already, or the world moved).",
        ),
    ] = None,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Carry out a plan: rent, stop and destroy at vast, saving state after every call."""
    interrupts = Interrupts(err=sys.stderr)
    deps = context.deps(state_dir, lock_timeout, stop_requested=interrupts.requested)
    with context.reported(deps), interrupts.installed():
        if reviewed is not None:
            specs = context.specs(reviewed)
            code = reviewing.apply_reviewed(
                deps, reviewed, specs, allow_mass_destroy=allow_mass_destroy
            )
        elif planfile.looks_like_plan(target):
            saved = _saved_plan(target)
            specs = context.specs(Path(saved.spec_path))
            code = reviewing.handed_or_applied(
                deps, saved, specs, allow_mass_destroy=allow_mass_destroy
            )
        else:
            specs = context.specs(target, warn=True)
            code = reviewing.specs_handed_or_applied(
                deps,
                specs,
                auto_approve=auto_approve,
                allow_mass_destroy=allow_mass_destroy,
                spec_path=target,
            )
    raise typer.Exit(code)


def _saved_plan(path: Path) -> planfile.SavedPlan:
    """The saved plan at `path`, or a refusal that says what to do."""
    try:
        return planfile.read(path)
    except planfile.PlanFileError as exc:
        raise planfile.PlanFileError(
            f"{exc}. Nothing was applied: make a new plan with `ray-vast plan SPEC_DIR -out "
            f"{path}` and apply that."
        ) from exc


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast down local-sim\n\n"
        "  ray-vast down rtx4090-pool --spec-dir clusters --auto-approve"
    )
)
def down(
    cluster: Annotated[str, typer.Argument(help="The cluster name (metadata.name).")],
    spec_dir: Annotated[
        Path | None,
        typer.Option("--spec-dir", help="Specs to find the cluster's provider URL in."),
    ] = None,
    auto_approve: AutoApprove = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Destroy every instance that carries the cluster's label, and wait until vast confirms.

    Instances of the cluster made by another state (a lost or copied state file) are listed
    and destroyed too. The cluster's Ray head, when ray-vast runs it, is stopped after the
    confirmation, under the state lock: a declined `down` ends nothing.
    """
    specs = context.specs(spec_dir) if spec_dir else []
    interrupts = Interrupts(err=sys.stderr)
    deps = up_mod.with_embedded(
        context.deps(state_dir, lock_timeout, stop_requested=interrupts.requested)
    )
    with context.reported(deps), interrupts.installed():
        head = up_mod.ray_head_stop(deps, cluster)
        try:
            code = downing.down(deps, cluster, specs, auto_approve=auto_approve, head=head)
        except StateLockedError as exc:
            if not handoff.to_controller(exc):
                raise
            code = handoff.down(deps, exc, cluster, specs, auto_approve=auto_approve, head=head)
        if code == 0 and up_mod.stop_simulator_if_unused(deps):
            typer.echo("Embedded vastsim stopped.")
    raise typer.Exit(code)
