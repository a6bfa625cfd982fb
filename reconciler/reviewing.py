"""The reviewed plan is what merges apply (DESIGN.md 11).

`plan DIR -out FILE --review` stores the saved plan under the git tree hash of DIR at HEAD (the
pull request's content, exactly); `apply --reviewed DIR` on the merge looks up the plan stored
under HEAD's tree of DIR and applies exactly it, or refuses as stale (exit 3) and says why: no
plan was reviewed for this content (the merge brought something no pull request planned), the
plan was applied already, or its clusters or instances moved since. It never plans afresh.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reconciler import handoff, planfile
from reconciler.deps import Deps, closed
from reconciler.errors import InputError
from reconciler.model.spec import ClusterSpec
from reconciler.operations import StalePlanError, apply_saved, apply_specs
from reconciler.state.errors import StateLockedError
from reconciler.state.lock import Identity
from reconciler.state.reviewed import (
    APPLIED,
    PENDING,
    STALE,
    FileReviewedPlans,
    Reviewed,
    ReviewedPlans,
)
from reconciler.state.sql.plans import SqlReviewedPlans
from reconciler.state.sql.store import SqlStore


@dataclass(frozen=True)
class SpecTree:
    """A spec directory as git has it at HEAD: its tree hash, and the commit."""

    tree: str
    commit: str


def spec_tree(directory: Path) -> SpecTree:
    """HEAD's tree of `directory`; refused when it is not in git or has uncommitted changes (a
    reviewed plan is of a commit, or the merge could not be matched with it)."""
    where = directory if directory.is_dir() else directory.parent
    top = _git(where, "rev-parse", "--show-toplevel")
    relative = directory.resolve().relative_to(Path(top).resolve()).as_posix()
    if _git(where, "status", "--porcelain", "--", str(directory.resolve())):
        raise InputError(
            f"{directory} has uncommitted changes: a reviewed plan is the plan of a commit."
            " Commit them (or plan without --review)."
        )
    tree = _git(where, "rev-parse", f"HEAD:{relative}" if relative != "." else "HEAD^{tree}")
    return SpecTree(tree, _git(where, "rev-parse", "HEAD"))


def _git(where: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(where), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(f"git could not be run in {where}: {exc}") from exc
    if done.returncode != 0:
        raise InputError(
            f"{where} is not a commit of a git repository (git {args[0]}: "
            f"{done.stderr.strip() or done.returncode}): --review and --reviewed need one"
        )
    return done.stdout.strip()


@contextlib.contextmanager
def reviewed_plans(deps: Deps) -> Iterator[ReviewedPlans]:
    """Where this state keeps its reviewed plans: its database, or its directory's files."""
    store = deps.store()
    try:
        if isinstance(store, SqlStore):
            yield SqlReviewedPlans(store.link)
        else:
            yield FileReviewedPlans(deps.state_dir)
    finally:
        closed(store, unlock=False)


def keep(deps: Deps, directory: Path, saved_plan: Path) -> SpecTree:
    """Store the plan saved at `saved_plan` as the reviewed plan of `directory`'s tree."""
    tree = spec_tree(directory)
    data = saved_plan.read_bytes()
    planfile.loads(data, str(saved_plan))  # a plan file, whole, or refused here
    reviewed = Reviewed(
        tree.tree, tree.commit, PENDING, deps.clock.now(), Identity.current().who, data
    )
    with reviewed_plans(deps) as plans:
        plans.put(reviewed)
    return tree


def apply_reviewed(
    deps: Deps, directory: Path, specs: list[ClusterSpec], *, allow_mass_destroy: bool
) -> int:
    """Apply exactly the plan reviewed for HEAD's tree of `directory`, or `StalePlanError`."""
    tree = spec_tree(directory)
    with reviewed_plans(deps) as plans:
        found = plans.get(tree.tree)
    if found is None:
        raise StalePlanError(
            f"No reviewed plan for {directory} as commit {tree.commit[:12]} has it (tree"
            f" {tree.tree[:12]}): no pull request planned exactly this content (a change came"
            " with the merge, or it was never planned with --review). Nothing was applied:"
            " plan it in a pull request."
        )
    if found.status != PENDING:
        raise StalePlanError(
            f"The reviewed plan of tree {tree.tree[:12]} (commit {found.commit[:12]}, by"
            f" {found.created_by}) was {found.status} already ({found.outcome}); it is never"
            " applied twice. Nothing was applied."
        )
    saved = planfile.loads(found.plan, f"the reviewed plan of tree {tree.tree[:12]}")
    try:
        code = handed_or_applied(deps, saved, specs, allow_mass_destroy=allow_mass_destroy)
    except StalePlanError as exc:
        _mark(deps, tree.tree, STALE, str(exc), only_from=PENDING)  # an apply that won stays
        raise
    if code == StalePlanError.exit_code:  # the controller found it stale
        _mark(deps, tree.tree, STALE, "stale, said the controller", only_from=PENDING)
    elif code == 0:
        _mark(deps, tree.tree, APPLIED, f"applied on commit {tree.commit[:12]}")
    return code


def specs_handed_or_applied(
    deps: Deps,
    specs: list[ClusterSpec],
    *,
    spec_path: Path,
    auto_approve: bool,
    allow_mass_destroy: bool,
) -> int:
    """`apply SPEC_DIR`: planned and carried out under this command's own lock, or planned here
    and handed to the live `watch` that holds it."""
    try:
        return apply_specs(
            deps, specs, auto_approve=auto_approve, allow_mass_destroy=allow_mass_destroy,
            spec_path=spec_path,
        )  # fmt: skip
    except StateLockedError as refused:
        if not handoff.to_controller(refused):
            raise
        return handoff.apply_specs(
            deps, refused, specs, spec_path=spec_path, auto_approve=auto_approve,
            allow_mass_destroy=allow_mass_destroy,
        )  # fmt: skip


def handed_or_applied(
    deps: Deps, saved: planfile.SavedPlan, specs: list[ClusterSpec], *, allow_mass_destroy: bool
) -> int:
    """`apply PLAN`: under this command's own lock, or handed to the live `watch` that holds it."""
    try:
        return apply_saved(deps, saved, specs, allow_mass_destroy=allow_mass_destroy)
    except StateLockedError as refused:
        if not handoff.to_controller(refused):
            raise
        return handoff.apply(deps, refused, saved, specs, allow_mass_destroy=allow_mass_destroy)


def _mark(deps: Deps, tree: str, status: str, outcome: str, only_from: str | None = None) -> None:
    with reviewed_plans(deps) as plans:
        plans.mark(tree, status, outcome, only_from=only_from)
