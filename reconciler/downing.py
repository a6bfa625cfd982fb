"""`ray-vast down CLUSTER` with the state's lock in hand: the kill switch.

Every instance vast lists with the cluster's label is destroyed (whoever's state made it), after
the person saw the list and said yes; vast's confirmation is awaited; the cluster's records are
closed once nothing of it is left. The cluster is marked held down (`model/applied.py`), so a
`watch` started later on an unchanged spec does not rent it back. When a live `watch` holds the
state, the down is handed to it instead (`handoff.down`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reconciler.applying.journal import Journal
from reconciler.applying.provider import Provider
from reconciler.applying.teardown import (
    DownOutcome,
    close_records,
    down_outcome,
    planned_down,
    wait_gone,
)
from reconciler.deps import Deps
from reconciler.model.applied import downed
from reconciler.model.observed import Instance
from reconciler.model.plan import Plan
from reconciler.model.spec import ClusterSpec
from reconciler.operations import EXIT_ERROR, EXIT_OK, OperationError, confirm, execute
from reconciler.planning import teardown
from reconciler.planning.refresh import refresh
from reconciler.vast.errors import VastError
from reconciler.views import progress, status_text


@dataclass(frozen=True)
class HeadStop:
    """The cluster's local Ray head, when ray-vast runs one: `down` names it beside the instances
    and stops it only after the confirmation, under the state lock (DESIGN.md section 10)."""

    description: str  # e.g. "the Ray head of local-sim (pid 4242) and every Ray node on it"
    stop: Callable[[], bool]


def down(
    deps: Deps,
    cluster: str,
    specs: Sequence[ClusterSpec],
    *,
    auto_approve: bool,
    head: HeadStop | None = None,
) -> int:
    """Destroy every instance that carries the cluster's label, whoever's state made it.

    The order is the lock, the listing, what will end (instances and the Ray head), the
    confirmation, and only then the Ray head's stop and the destroys: a declined or refused
    `down` ends nothing.
    """
    provider = deps.provider([s for s in specs if s.name == cluster])
    with deps.journal("down") as journal:
        listing, listed_at = listed(provider), deps.clock.now()
        plan = planned_down(journal, cluster, listing, listed_at)
        targets = [i for i in listing if teardown.labelled_for(i, cluster)]
        deps.out.write(status_text.down_listing(cluster, targets, journal.lineage))
        if head is not None:
            deps.out.write(f"ray-vast down {cluster} will stop {head.description}.\n")
        hold = lambda records: downed(records, cluster, deps.clock.now(), specs)  # noqa: E731
        if not targets and head is None:
            journal.update(hold)
            close_records(journal, cluster, deps.clock.now())
            return EXIT_OK
        approve_down(deps, auto_approve=auto_approve)
        # what vast's listing showed, folded in as a watch's tick would (its clocks are the
        # bill's: with no watch running, this may be the only listing that saw them run)
        journal.update(lambda records: refresh(records, tuple(listing), listed_at)[0])
        journal.update(hold)
        if head is not None and head.stop():
            deps.out.write(f"Ray head of {cluster} stopped.\n")
        if not targets:
            close_records(journal, cluster, deps.clock.now())
            return EXIT_OK
        outcome = _destroy_all(deps, journal, provider, specs, plan)
        if outcome.complete:
            close_records(journal, cluster, deps.clock.now())
    return _down_said(deps, cluster, len(targets), outcome)


def listed(provider: Provider) -> list[Instance]:
    """Vast's listing for a down: no listing, nothing is destroyed."""
    try:
        return provider.list_instances()
    except VastError as exc:
        raise OperationError(f"cannot list vast's instances ({exc}); nothing destroyed") from exc


def approve_down(deps: Deps, *, auto_approve: bool) -> None:
    """The person's 'yes' (unless approved already), and no stop asked for meanwhile."""
    if not auto_approve:
        confirm(deps, "down")
    if deps.stop_requested():
        raise OperationError("Down interrupted before anything was stopped or destroyed.")


def _destroy_all(
    deps: Deps, journal: Journal, provider: Provider, specs: Sequence[ClusterSpec], plan: Plan
) -> DownOutcome:
    """The destroys carried out, then vast's confirmation of each one sent awaited."""
    result = execute(deps, journal, provider, specs=specs, plan=plan, launcher=None)
    return down_outcome(plan, result, lambda pending: confirm_gone(deps, provider, pending))


def confirm_gone(deps: Deps, provider: Provider, pending: set[int]) -> set[int]:
    """Wait (saying so) until vast's listing no longer shows `pending`: what it still shows."""
    waiting = f"Waiting for vast to confirm {len(pending)} destroy(s)"
    with progress.waiting(waiting, out=deps.out, env=deps.env):
        return wait_gone(provider, pending, clock=deps.clock, stop_requested=deps.stop_requested)


def _down_said(deps: Deps, cluster: str, targets: int, outcome: DownOutcome) -> int:
    """What the person reads of a down once it ended, and its exit code."""
    remaining = outcome.remaining
    if not outcome.interrupted and remaining and deps.stop_requested():
        deps.err.write(
            f"\nDown interrupted while vast confirms the destroys of {sorted(remaining)} (all "
            f"sent); state saved. Run `ray-vast down {cluster}` again to see them gone.\n"
        )
        return EXIT_ERROR
    if outcome.interrupted:
        deps.err.write(
            f"\nDown interrupted; state saved. Not destroyed yet: {sorted(outcome.undone)}. "
            f"Run `ray-vast down {cluster}` again.\n"
        )
        return EXIT_ERROR
    if outcome.failed or remaining:
        deps.err.write(f"Error: still present at vast: {sorted(outcome.failed | remaining)}\n")
        return EXIT_ERROR
    deps.out.write(f"\nDown complete: {targets} instance(s) of {cluster} destroyed.\n")
    return EXIT_OK
