"""Guards a plan must pass before it is applied without a person's explicit say-so.

A plan that would destroy most of a cluster by policy (a spec removed, max_workers cut, orphans
swept) needs `--allow-mass-destroy`, as a mistyped directory must not end a fleet. Replacing
machines that failed is routine and needs no flag.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.plan import Action, ActionKind, Plan
from reconciler.model.records import Records

POLICY_REASONS = frozenset({"removed_from_spec", "scale_down", "orphan"})


def mass_destroys(plan: Plan, records: Records) -> list[str]:
    """The clusters of which the plan would destroy more than half by policy."""
    return [f"{cluster}: {why}" for cluster, why in _flagged(plan, records)]


def _by_policy(action: Action) -> bool:
    return action.kind is ActionKind.DESTROY and action.reason in POLICY_REASONS


def _flagged(plan: Plan, records: Records) -> list[tuple[str, str]]:
    flagged = []
    for cluster in sorted({a.cluster for a in plan.actions}):
        live = len(records.live_instances(cluster))
        by_policy = sum(1 for a in plan.actions if a.cluster == cluster and _by_policy(a))
        if by_policy >= 2 and by_policy * 2 > max(live, by_policy):
            flagged.append((cluster, f"{by_policy} of {max(live, by_policy)} instances"))
    return flagged


def hold_mass_destroys(plan: Plan, records: Records) -> tuple[Plan, list[tuple[str, str]]]:
    """For an unattended controller (`watch`): the plan without the policy destroys of every
    cluster it would mostly destroy, and why each was held. The nets' own detections (failed
    machines) and everything else in the plan go ahead; a person decides the rest."""
    flagged = _flagged(plan, records)
    if not flagged:
        return plan, []
    held = {cluster for cluster, _ in flagged}
    kept = tuple(a for a in plan.actions if not (a.cluster in held and _by_policy(a)))
    reasons = [
        (
            cluster,
            f"the plan would destroy {why} by policy (removed from the specs, scaled down, "
            "swept); held: `ray-vast apply --allow-mass-destroy` or `ray-vast down` decides",
        )
        for cluster, why in flagged
    ]
    return replace(plan, actions=kept), reasons
