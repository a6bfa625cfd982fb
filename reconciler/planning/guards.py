"""Guards a plan must pass before it is applied without a person's explicit say-so.

A plan that would destroy most of a cluster by policy (a spec removed, max_workers cut, orphans
swept) needs `--allow-mass-destroy`, as a mistyped directory must not end a fleet. Replacing
machines that failed is routine and needs no flag.

"Most of a cluster" is more than half of its live instances, and that includes all of a cluster
of one: a guard with a minimum count of two never held a one-instance cluster, so removing or
renaming the file of a cluster with one worker ended that worker unasked, while the same mistake
with two workers was held. Flux's prune has no guard at all and Terraform asks once for every
destroy; ray-vast's guard answers the unattended case (`watch`), where nobody confirms, so it
holds any plan that would end every machine of a cluster that has any, the one machine
included. The prune of a removed spec ends the whole cluster (a machine a pin holds against the
prune is ended later, when the pin ends), so it always counts as all of it: a person says yes
once (`watch --allow-mass-destroy`, `apply --allow-mass-destroy`, or `down`), whether the pins
end before or after. Two cases stay as they were: a sweep of orphans in a cluster of which we
hold no live record needs at least two to be held (a lone orphan is a create whose record was
lost, which the sweep exists to end), and at most half of a cluster is never held.
`watch` without the flag holds exactly the destroys that `apply` without it refuses (one rule,
`_flagged`), and alerts instead of failing.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.plan import Action, ActionKind, Plan
from reconciler.model.records import Records

PRUNE = "removed_from_spec"
ORPHAN = "orphan"
POLICY_REASONS = frozenset({PRUNE, "scale_down", ORPHAN})


def mass_destroys(plan: Plan, records: Records) -> list[str]:
    """The clusters of which the plan would destroy most (more than half, or all of one) by
    policy."""
    return [f"{cluster}: {why}" for cluster, why in _flagged(plan, records)]


def _by_policy(action: Action) -> bool:
    return action.kind is ActionKind.DESTROY and action.reason in POLICY_REASONS


def _flagged(plan: Plan, records: Records) -> list[tuple[str, str]]:
    """(cluster, how much of it) for every cluster whose most the plan would end by policy;
    `records` are those the plan was made on."""
    flagged = []
    for cluster in sorted({a.cluster for a in plan.actions}):
        actions = [a for a in plan.actions if a.cluster == cluster]
        live = len(records.live_instances(cluster))
        ending = sum(1 for a in actions if _by_policy(a))
        # swept orphans are machines of the cluster beside its live records, not among them: a
        # lone orphan next to one worker is half of it, not all (a guard that counted it as all
        # held every sweep of a one-worker cluster, and the orphan billed on: `ray-vast simulate`
        # priced a 2-hour run 14% under the meter)
        orphans = sum(1 for a in actions if _by_policy(a) and a.reason == ORPHAN)
        whole = live + orphans
        if ending and any(a.reason == PRUNE for a in actions):
            ending = max(ending, whole)  # the prune ends it all, what pins hold included
        if ending * 2 > whole and (live > 0 or ending >= 2):
            flagged.append((cluster, f"{ending} of {whole} instances"))
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
