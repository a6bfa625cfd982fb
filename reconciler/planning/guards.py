"""Guards a plan must pass before it is applied without a person's explicit say-so.

A plan that would destroy most of a cluster by policy (a spec removed, max_workers cut, orphans
swept) needs `--allow-mass-destroy`, as a mistyped directory must not end a fleet. Replacing
machines that failed is routine and needs no flag.
"""

from __future__ import annotations

from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import Records

POLICY_REASONS = frozenset({"removed_from_spec", "scale_down", "orphan"})


def mass_destroys(plan: Plan, records: Records) -> list[str]:
    """The clusters of which the plan would destroy more than half by policy."""
    flagged = []
    clusters = {a.cluster for a in plan.actions}
    for cluster in sorted(clusters):
        live = len(records.live_instances(cluster))
        by_policy = sum(
            1
            for a in plan.actions
            if a.cluster == cluster and a.kind is ActionKind.DESTROY and a.reason in POLICY_REASONS
        )
        if by_policy >= 2 and by_policy * 2 > max(live, by_policy):
            flagged.append(f"{cluster}: {by_policy} of {max(live, by_policy)} instances")
    return flagged
