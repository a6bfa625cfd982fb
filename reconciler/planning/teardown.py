"""`down` as a plan: Terraform's destroy mode, carried out by the one executor.

Every instance vast lists with the cluster's label is destroyed, whoever's state made it (`down` is
the kill switch: an instance another state lost track of must end too), and so is every machine a
pin holds against a prune (DESIGN.md 11: pins hold against prune, `down` ends everything). A live
record of ours for an instance becomes the action's record, so the executor saves its intent
before the call and its end after; an instance with no live record is destroyed by its vast id
alone. The records are not changed by the plan itself: nothing is decided before the person
confirms.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.labels import parse_label
from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind, ClusterCost, Plan
from reconciler.model.records import InstanceRecord, Records
from reconciler.planning.plan import DOWN_REASON, fingerprint, touched


def labelled_for(instance: Instance, cluster: str) -> bool:
    info = parse_label(instance.label)
    return info is not None and info.cluster == cluster


def down_plan(
    cluster: str,
    listing: Sequence[Instance],
    records: Records,
    *,
    lineage: str,
    serial: int,
    now: float,
) -> Plan:
    """The destroy of every listed instance labelled for `cluster`, in the listing's order."""
    live = {r.vast_id: r for r in records.instances.values() if r.live and r.vast_id is not None}
    targets = [i for i in listing if labelled_for(i, cluster)]
    actions = tuple(_destroy(cluster, instance, live.get(instance.id)) for instance in targets)
    before = sum(i.dph_total or 0.0 for i in targets)
    return Plan(
        created_at=now,
        lineage=lineage,
        serial=serial,
        listing_fingerprint=fingerprint(listing, touched(actions)),
        actions=actions,
        costs=(ClusterCost(cluster, before, 0.0, 0.0),),
    )


def _destroy(cluster: str, instance: Instance, known: InstanceRecord | None) -> Action:
    return Action(
        ActionKind.DESTROY,
        cluster,
        DOWN_REASON,
        f"ray-vast down {cluster}",
        node_type=known.node_type if known else None,
        record=known.id if known else None,
        vast_id=instance.id,
        label=instance.label,
        host_id=known.host_id if known else None,
        dph_delta=-(instance.dph_total or 0.0),
    )
