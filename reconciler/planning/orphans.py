"""The orphan sweep and the instances of our clusters that another state made.

Only a label tells us an instance is ours. `rv.<cluster>.<our lineage8>.` with no live record is
an orphan (a crash between create and save, a record lost): it is destroyed once it is older than
the grace window, measured from our own first observation of it (`Records.unrecorded_seen`),
never from vast's `start_date` (the two differ, and vast's may be long before we could know).
`rv.<cluster>.<another lineage8>.` is the same cluster under another state (a lost or copied state
file): never acted on, but shown loudly with its $/h. Anything else is not ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from reconciler.model.labels import LabelInfo, parse_label
from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind, Foreign
from reconciler.model.records import InstanceRecord
from reconciler.model.spec import ClusterSpec


def sweep(
    listing: Iterable[Instance],
    records: Mapping[str, InstanceRecord],
    specs: Mapping[str, ClusterSpec],
    *,
    lineage: str,
    now: float,
    scope: set[str],
    first_seen: Mapping[int, float],
) -> tuple[list[Action], list[Foreign]]:
    """Orphans of the clusters in `scope` (the clusters the plan is about) and instances another
    state made for them. `first_seen` says when we first saw each unrecorded instance."""
    actions: list[Action] = []
    foreign: list[Foreign] = []
    by_vast_id = {r.vast_id: r for r in records.values() if r.vast_id is not None}
    for instance in listing:
        info = parse_label(instance.label)
        if info is None or info.cluster not in scope:
            continue
        if info.lineage8 != lineage[:8]:
            foreign.append(_foreign(info.cluster, instance))
            continue
        record = records.get(info.record_id) or by_vast_id.get(instance.id)
        if record is not None and record.live:
            continue
        spec = specs.get(info.cluster)
        grace = spec.watchdogs.orphan_grace_seconds if spec else DEFAULT_GRACE_SECONDS
        action = _orphan(info.cluster, instance, grace, now - first_seen.get(instance.id, now))
        if action:
            actions.append(action)
    return actions, foreign


DEFAULT_GRACE_SECONDS = 600


def unrecorded(
    listing: Iterable[Instance],
    records: Mapping[str, InstanceRecord],
    *,
    lineage: str,
    seen_before: Mapping[int, float],
    now: float,
) -> dict[int, float]:
    """When we first saw each listed instance labelled ours that no live record answers for."""
    return {
        instance.id: seen_before.get(instance.id, now)
        for instance, _ in _unanswered(listing, records, lineage)
    }


def unrecorded_dph(
    listing: Iterable[Instance], records: Mapping[str, InstanceRecord], *, lineage: str
) -> dict[str, float]:
    """$/h of instances labelled ours that no live record answers for, by cluster."""
    total: dict[str, float] = {}
    for instance, info in _unanswered(listing, records, lineage):
        total[info.cluster] = total.get(info.cluster, 0.0) + (instance.dph_total or 0.0)
    return total


def _unanswered(
    listing: Iterable[Instance], records: Mapping[str, InstanceRecord], lineage: str
) -> Iterator[tuple[Instance, LabelInfo]]:
    """The listed instances labelled ours (this state's lineage) that no live record answers
    for, by the label's record id or by the instance id, with their labels read."""
    by_vast_id = {r.vast_id: r for r in records.values() if r.vast_id is not None}
    for instance in listing:
        info = parse_label(instance.label)
        if info is None or info.lineage8 != lineage[:8]:
            continue
        record = records.get(info.record_id) or by_vast_id.get(instance.id)
        if record is None or not record.live:
            yield instance, info


def _foreign(cluster: str, instance: Instance) -> Foreign:
    return Foreign(
        cluster,
        instance.id,
        instance.label or "",
        instance.dph_total or 0.0,
        instance.actual_status,
    )


def _orphan(cluster: str, instance: Instance, grace: float, age: float) -> Action | None:
    if age < grace:
        return None
    return Action(
        ActionKind.DESTROY,
        cluster,
        "orphan",
        f"labelled {instance.label} but no live record of ours; seen by us {age:.0f}s ago "
        f"(grace {grace:g}s)",
        vast_id=instance.id,
        label=instance.label,
        host_id=instance.host_id,
        dph_delta=-(instance.dph_total or 0.0),
    )
