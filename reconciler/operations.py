"""What `plan`, `apply`, `down`, `status`, `pin` and `unpin` do, given their dependencies.

The CLI parses arguments and maps outcomes to exit codes; these functions do the work, writing
human output to `deps.out`/`deps.err`. They never read the environment, the clock or the terminal
except through `deps`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reconciler import __version__, planfile
from reconciler.applying.executor import ApplyResult, Executor
from reconciler.applying.journal import Journal, records_of
from reconciler.applying.launch import ImageLauncher, Launcher
from reconciler.applying.observe import observe_and_plan
from reconciler.applying.provider import Provider
from reconciler.deps import Deps
from reconciler.errors import RayVastError
from reconciler.model import cost as cost_model
from reconciler.model.applied import remembered
from reconciler.model.generations import generations, moved
from reconciler.model.observed import Instance
from reconciler.model.plan import Plan
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning.guards import mass_destroys
from reconciler.planning.plan import fingerprint, touched
from reconciler.spec.loader import last_applied
from reconciler.state import simclock
from reconciler.vast.errors import VastError
from reconciler.views import cost as cost_view
from reconciler.views import plan as plan_view
from reconciler.views import progress, status_text
from reconciler.views import status as status_view

# Exit codes, as Terraform's `-detailed-exitcode` has them.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2


class OperationError(RayVastError):
    """A refusal to go on, with a message for the person at the terminal."""


class StalePlanError(OperationError):
    """A saved (or reviewed) plan that no longer describes the world: its specs, the clusters it
    covers or the instances it acts on changed since it was made. Exit 3, apart from errors (1),
    so a pipeline can tell "plan again" from "broken"."""

    exit_code = 3


@dataclass(frozen=True)
class PlanOutcome:
    plan: Plan
    exit_code: int


def make_plan(
    deps: Deps,
    specs: Sequence[ClusterSpec],
    *,
    spec_path: Path,
    out_file: Path | None,
    as_json: bool,
    detailed: bool,
) -> PlanOutcome:
    """`declared` (see `declared_by`): the clusters of a whole spec directory, for pruning."""
    saved = plan_to_save(deps, specs, spec_path=spec_path)
    plan = saved.plan
    if as_json:
        deps.out.write(json.dumps(plan_view.as_json(plan), indent=2) + "\n")
    else:
        deps.out.write(plan_view.human(plan))
    if plan.errored:
        return PlanOutcome(plan, EXIT_ERROR)
    if out_file is not None:
        planfile.write(out_file, saved)
        if not as_json:
            deps.out.write(
                f"\nSaved the plan to: {out_file}\n\nTo perform exactly these actions, run:\n"
                f"    ray-vast apply {out_file}\n"
            )
    elif not as_json and plan.has_changes:
        deps.out.write(
            "\nNote: You didn't use the -out option to save this plan, so ray-vast can't "
            "guarantee to take exactly these actions if you run `ray-vast apply` now.\n"
        )
    changed = EXIT_CHANGES if detailed and plan.has_changes else EXIT_OK
    return PlanOutcome(plan, changed)


def plan_to_save(
    deps: Deps, specs: Sequence[ClusterSpec], *, spec_path: Path
) -> planfile.SavedPlan:
    """A plan of `specs` on the state as last saved (no lock), with what it was made from: the
    specs' digests and the generations of the clusters it covers (a saved plan's staleness)."""
    provider = deps.provider(list(specs))
    with deps.reading() as snapshot:
        plan = observe_and_plan(
            provider,
            specs,
            records_of(snapshot),
            lineage=snapshot.lineage,
            serial=snapshot.serial,
            now=deps.clock.now(),
            declared=declared_by(spec_path, specs),
        )
    digests = {s.name: s.digest for s in specs}
    covered = {*digests, *(a.cluster for a in plan.actions)}
    made_from = generations(records_of(snapshot), covered)
    return planfile.SavedPlan(plan, str(spec_path), digests, __version__, made_from)


def declared_by(spec_path: Path | None, specs: Sequence[ClusterSpec]) -> set[str] | None:
    """What a plan may prune against (DESIGN.md 10, "Scope of a plan"): the clusters of a spec
    *directory* (it loaded completely, or nothing is planned at all); one file is a plan about
    its own clusters only, and retires nothing else."""
    if spec_path is None or not spec_path.is_dir():
        return None
    return {s.name for s in specs}


def _plan(
    deps: Deps,
    journal: Journal,
    provider: Provider,
    specs: Sequence[ClusterSpec],
    spec_path: Path | None,
) -> Plan:
    return observe_and_plan(
        provider,
        specs,
        journal.records(),
        lineage=journal.lineage,
        serial=journal.serial,
        now=deps.clock.now(),
        declared=declared_by(spec_path, specs),
    )


def apply_specs(
    deps: Deps,
    specs: Sequence[ClusterSpec],
    *,
    auto_approve: bool,
    allow_mass_destroy: bool,
    launcher: Launcher | None = None,
    spec_path: Path | None = None,
) -> int:
    provider = deps.provider(list(specs))
    with deps.journal("apply") as journal:
        plan = _plan(deps, journal, provider, specs, spec_path)
        deps.out.write(plan_view.human(plan))
        if plan.errored:
            return EXIT_ERROR
        if not plan.has_changes:  # applied all the same: a `down`'s hold of these lifts
            journal.update(lambda records: remembered(plan.changes.apply(records), specs))
            return EXIT_OK
        _guard(plan, journal, allow_mass_destroy)
        if not auto_approve:
            confirm(deps)
        result = execute(deps, journal, provider, specs=specs, plan=plan, launcher=launcher)
        journal.update(lambda records: remembered(records, specs))  # for `status` with no specs
    return _report(deps, result)


def apply_saved(
    deps: Deps,
    saved: planfile.SavedPlan,
    specs: Sequence[ClusterSpec],
    *,
    allow_mass_destroy: bool,
    launcher: Launcher | None = None,
) -> int:
    """Apply exactly a saved plan, or refuse it as stale."""
    check_specs(saved, specs)
    provider = deps.provider(list(specs))
    with deps.journal("apply") as journal:
        check_saved(saved, journal, provider.list_instances(), allow_mass_destroy)
        result = execute(deps, journal, provider, specs=specs, plan=saved.plan, launcher=launcher)
        journal.update(lambda records: remembered(records, specs))  # for `status` with no specs
    return _report(deps, result)


def check_specs(saved: planfile.SavedPlan, specs: Sequence[ClusterSpec]) -> None:
    """`StalePlanError` unless these are the specs the plan was made from."""
    if {s.name: s.digest for s in specs} != saved.spec_digests:
        raise StalePlanError(
            "Saved plan is stale: the cluster specs changed since the plan was made; plan again."
        )


def check_saved(
    saved: planfile.SavedPlan, journal: Journal, listing: Sequence[Instance], allow: bool
) -> None:
    """Refuse a saved plan the state or vast outgrew (the CLI's apply and the controller's
    apply order ask the same questions): another state's, a cluster it covers moved, the live
    instances it acts on changed, or a mass destroy not allowed."""
    plan = saved.plan
    if journal.lineage != plan.lineage:
        raise OperationError(
            "Saved plan does not match the given state: it was created from a different "
            f"state lineage ({plan.lineage[:8]}, the state is {journal.lineage[:8]})."
        )
    changed = moved(saved.generations, journal.records())
    if changed:
        raise StalePlanError(
            f"Saved plan is stale: cluster {', '.join(changed)} changed since the plan was"
            f" made (state serial {plan.serial} -> {journal.serial}); plan again."
        )
    if fingerprint(listing, touched(plan.actions)) != plan.listing_fingerprint:
        raise StalePlanError(
            "Saved plan is stale: the live instances it acts on changed since it was made; "
            "plan again."
        )
    _guard(plan, journal, allow)


def _guard(plan: Plan, journal: Journal, allow: bool) -> None:
    flagged = mass_destroys(plan, journal.records())
    if flagged and not allow:
        raise OperationError(
            "This plan destroys most of a cluster ("
            + "; ".join(flagged)
            + "). Re-run with --allow-mass-destroy if that is what you want."
        )


def confirm(deps: Deps, command: str = "apply") -> None:
    """Ask for a literal 'yes' on a terminal; refuse (never hang) without one."""
    if not deps.interactive:
        if command == "down":
            raise OperationError(
                "down needs approval: no terminal to ask on. Nothing was stopped or destroyed. "
                "Re-run with --auto-approve."
            )
        raise OperationError(
            "apply needs approval: no terminal to ask on. Re-run with --auto-approve, or save "
            "the plan with `ray-vast plan -out FILE` and apply the file."
        )
    deps.out.write(
        "\nDo you want to perform these actions?\n  ray-vast will perform the actions described "
        "above.\n  Only 'yes' will be accepted to approve.\n\n"
    )
    if deps.ask("  Enter a value: ").strip() != "yes":
        raise OperationError(f"{command.capitalize()} cancelled. Nothing was changed.")


def execute(
    deps: Deps,
    journal: Journal,
    provider: Provider,
    *,
    specs: Sequence[ClusterSpec],
    plan: Plan,
    launcher: Launcher | None,
) -> ApplyResult:
    executor = Executor(
        provider=provider,
        journal=journal,
        launcher=launcher or ImageLauncher(),
        specs={s.name: s for s in specs},
        now=deps.clock.now,
        stop_requested=deps.stop_requested,
        progress=lambda line: _say(deps, line),
    )
    with progress.waiting(f"Applying {len(plan.actions)} action(s)", out=deps.out, env=deps.env):
        result = executor.apply(plan)
    return result


def _say(deps: Deps, line: str) -> None:
    deps.out.write(line + "\n")
    deps.out.flush()


def _report(deps: Deps, result: ApplyResult) -> int:
    code, text = outcome_of(result)
    (deps.out if code == EXIT_OK else deps.err).write(text)
    return code


def outcome_of(result: ApplyResult) -> tuple[int, str]:
    """An apply's exit code and what it says (the CLI's, and a controller's answer)."""
    counts: dict[str, int] = {}
    for action in result.done:
        counts[action.kind.value] = counts.get(action.kind.value, 0) + 1
    done = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing done"
    if result.interrupted:
        return EXIT_ERROR, f"\nApply interrupted; state saved. Done: {done}.\n"
    if result.failed:
        lines = [
            f"Error: {a.kind.value} {a.record or a.vast_id}: {why}\n" for a, why in result.failed
        ]
        return EXIT_ERROR, "".join(lines) + f"\nApply finished with errors. Done: {done}.\n"
    return EXIT_OK, f"\nApply complete! {done}.\n"


# --- status --------------------------------------------------------------------------------


def status(deps: Deps, specs: Sequence[ClusterSpec], *, as_json: bool) -> int:
    """With no specs given: the specs each cluster was last applied from."""
    records, lineage, serial = deps.read_records()
    specs = specs or last_applied(records)
    listing: list[Instance] | None
    error = None
    if _simulator_gone(deps, specs, records):
        listing = []  # a simulator-only user after `down`: nothing runs, and no key to ask for
    else:
        try:
            listing = deps.provider(list(specs)).list_instances()
        except VastError as exc:
            listing, error = None, str(exc)
    view = status_view.build(
        records, listing, specs, lineage=lineage, serial=serial, now=deps.clock.now(), error=error
    )
    if as_json:
        deps.out.write(json.dumps(view, indent=2) + "\n")
    else:
        deps.out.write(status_text.human(view))
    return EXIT_OK if error is None else EXIT_ERROR


def _simulator_gone(deps: Deps, specs: Sequence[ClusterSpec], records: Records) -> bool:
    """Every cluster runs on the embedded simulator, it is not running (no VAST_URL: `up` sets
    one while it runs) and nothing is live: the listing is known to be empty."""
    simulated = bool(specs) and all(s.provider.type == "vastsim" for s in specs)
    return simulated and "VAST_URL" not in deps.env and not records.live_instances()


# --- cost ----------------------------------------------------------------------------------


def cost(
    deps: Deps,
    specs: Sequence[ClusterSpec],
    *,
    since: float | None,
    until: float | None,
    by: str,
    as_json: bool,
) -> int:
    """What the machines cost between `since` and `until` (None: from the first bill known, to
    now), by cause, from the state's records and the ledger; vast is not called. With specs, only
    their clusters."""
    records, _, _ = deps.read_records()
    bills = cost_model.lives_from_ledger(deps.ledger_entries())
    clusters = [s.name for s in specs] if specs else None
    simulated = simclock.read(deps.state_dir) if until is None else None
    end = until if until is not None else simulated.end if simulated else deps.clock.now()
    if since is not None and since >= end:
        raise OperationError(f"--since is not before --until ({since:.0f} >= {end:.0f})")
    view = cost_view.build(cost_view.lives(records, bills, clusters), since=since, until=end, by=by)
    if as_json:
        deps.out.write(json.dumps(view, indent=2) + "\n")
    else:
        deps.out.write(cost_view.human(view))
    return EXIT_OK


# --- pin / unpin ---------------------------------------------------------------------------
