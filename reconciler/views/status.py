"""`ray-vast status` and the confirmation list of `ray-vast down`.

Status joins the records with the live listing: every instance we answer for with its phase, age
and $/h, and, loudly, instances labelled for our clusters that another state made. When vast
cannot be listed, it says so instead of pretending nothing runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reconciler.model.observed import Instance
from reconciler.model.records import Records, parse_label
from reconciler.model.spec import ClusterSpec

FORMAT_VERSION = "1.0"


def build(
    records: Records,
    listing: Sequence[Instance] | None,
    specs: Sequence[ClusterSpec],
    *,
    lineage: str | None,
    serial: int,
    now: float,
    error: str | None,
) -> dict[str, Any]:
    by_id = {i.id: i for i in listing or ()}
    names = sorted({s.name for s in specs} | {r.cluster for r in records.live_instances()})
    caps = {s.name: s.max_dollars_per_hour for s in specs}
    clusters = []
    for name in names:
        instances = [
            _instance(r.vast_id, r, by_id, now, listing is not None)
            for r in sorted(records.live_instances(name), key=lambda r: r.id)
        ]
        foreign = [
            _foreign(i)
            for i in listing or ()
            if (info := parse_label(i.label))
            and info.cluster == name
            and (lineage is None or info.lineage8 != lineage[:8])
        ]
        clusters.append(
            {
                "name": name,
                "cap_dollars_per_hour": caps.get(name),
                "dollars_per_hour": round(sum(i["dollars_per_hour"] for i in instances), 4),
                "instances": instances,
                "foreign_instances": foreign,
            }
        )
    return {
        "format_version": FORMAT_VERSION,
        "lineage": lineage,
        "serial": serial,
        "listing_error": error,
        "alerts": [
            {
                "at": a.at,
                "cluster": a.cluster,
                "class": a.cls,
                "record": a.record,
                "message": a.message,
            }
            for a in records.alerts
        ],
        "clusters": clusters,
        "dollars_per_hour": round(sum(c["dollars_per_hour"] for c in clusters), 4),
    }


def _instance(
    vast_id: int | None, record: Any, by_id: dict[int, Instance], now: float, listed: bool
) -> dict[str, Any]:
    seen = by_id.get(vast_id) if vast_id is not None else None
    return {
        "record": record.id,
        "node_type": record.node_type,
        "vast_id": vast_id,
        "role": record.role.value,
        "phase": record.phase.value,
        "intent": record.intent.value,
        "vast_status": (seen.actual_status if seen else ("missing" if listed else "unknown")),
        "age_seconds": round(now - record.created_at, 1),
        "dollars_per_hour": round(record.billing_dph, 4),
        "host_id": record.host_id,
        "label": record.label,
        "lost": record.lost,
        "pinned": record.pinned,
    }


def _foreign(instance: Instance) -> dict[str, Any]:
    return {
        "vast_id": instance.id,
        "label": instance.label,
        "vast_status": instance.actual_status,
        "dollars_per_hour": instance.dph_total or 0.0,
    }


def human(view: dict[str, Any]) -> str:
    lines = [
        f"ALERT {a['cluster']} {a['class']} {a['record'] or ''}: {a['message']}"
        for a in view["alerts"]
    ]
    if view["listing_error"]:
        lines.append(f"Warning: vast's listing is unknown ({view['listing_error']})")
    for cluster in view["clusters"]:
        cap = cluster["cap_dollars_per_hour"]
        cap_text = f" (cap {cap:.2f})" if cap is not None else ""
        lines.append(f"Cluster {cluster['name']}: ${cluster['dollars_per_hour']:.2f}/h{cap_text}")
        if not cluster["instances"]:
            lines.append("  no instances")
        for i in cluster["instances"]:
            flags = "".join(f" [{f}]" for f in ("lost", "pinned") if i[f])
            lines.append(
                f"  {i['record']:<8} {i['node_type']:<12} vast {i['vast_id']!s:<10} "
                f"{i['role']:<9} {i['phase']:<14} vast:{i['vast_status']!s:<10} "
                f"{_age(i['age_seconds']):>7}  ${i['dollars_per_hour']:.3f}/h{flags}"
            )
        for f in cluster["foreign_instances"]:
            lines.append(
                f"  ! instance {f['vast_id']} ({f['label']}, ${f['dollars_per_hour']:.2f}/h) "
                "belongs to another state: not managed here"
            )
    lines.append(f"Total: ${view['dollars_per_hour']:.2f}/h")
    return "\n".join(lines) + "\n"


def down_listing(cluster: str, targets: Sequence[Instance], lineage: str) -> str:
    if not targets:
        return f"No instance of {cluster} at vast.\n"
    lines = [f"ray-vast down {cluster} will destroy {len(targets)} instance(s):"]
    for instance in targets:
        info = parse_label(instance.label)
        other = info is not None and info.lineage8 != lineage[:8]
        lines.append(
            f"  - instance {instance.id} {instance.label} ({instance.actual_status}, "
            f"${instance.dph_total or 0.0:.3f}/h)" + ("  <- made by another state" if other else "")
        )
    total = sum(i.dph_total or 0.0 for i in targets)
    lines.append(f"$/h {total:.2f} -> 0.00")
    return "\n".join(lines) + "\n"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
