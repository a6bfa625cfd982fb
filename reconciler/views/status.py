"""`ray-vast status` as data (its `--json`); `views/status_text.py` says it to a person.

Status joins the records with the live listing: every instance we answer for with its phase, age
and $/h and whether work holds it (Ray's, or a person's `ray-vast pin`), and, loudly, instances
labelled for our clusters that another state made. Each cluster also shows what waits for a
person (its alerts) and its rent-loop breakers (a paused node type, and the count of slots in a
row that ended with no worker), and loudly a node type halted by a permanent failure (its image
runs a Ray or Python the head's Ray refuses), which rents nothing until its image or env
changes. When vast cannot be listed, it says so instead of pretending nothing runs.

`--json` is versioned: `format_version` is MAJOR.MINOR; a minor version only adds fields.
1.1 added `generated_at`; `held`, `held_because`, `pinned_by` and `pinned_until` per instance;
`alerts` and `breakers` per cluster. 1.2 added `halted` and `halt` per breaker. 1.5 added
`held_down_at` per cluster (since when `ray-vast down` holds it down; null when it does not).
1.6 added `ray` per cluster (its head's `address` and the URL of its `dashboard` and Jobs API;
null when the cluster's spec is not known here). 1.7 added `scheduling` per cluster (`ray` or
`cheapest`; null when its spec is not known here) and `chosen`: per node type that
`scheduling: cheapest` launched by price and that still has an open request or a live machine
from it, why (its price per request against the other node types').
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.model.labels import parse_label
from reconciler.model.observed import Instance
from reconciler.model.records import Alert, BreakerState, InstanceRecord, Records
from reconciler.model.requestrecord import Request, RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.nets import idle
from reconciler.nets.base import serving_workers

FORMAT_VERSION = "1.7"
# The human view shows a cluster's newest alerts; `--json` has every one.
ALERTS_SHOWN = 10


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
    by_name = {s.name: s for s in specs}
    breakers = _breakers_by_cluster(records.breakers)
    seen = _Seen(
        listing=listing,
        by_id={i.id: i for i in listing or ()},
        lineage=lineage,
        serving=serving_workers(records.instances.values()),
        specs=by_name,
        now=now,
    )
    clusters = [
        _cluster(name, records, seen, breakers.get(name, {}))
        for name in _cluster_names(records, by_name, breakers, now)
    ]
    return {
        "format_version": FORMAT_VERSION,
        "lineage": lineage,
        "serial": serial,
        "generated_at": now,
        "listing_error": error,
        "alerts": [_alert(a) for a in records.alerts],
        "clusters": clusters,
        "dollars_per_hour": round(sum(c["dollars_per_hour"] for c in clusters), 4),
    }


@dataclass(frozen=True)
class _Seen:
    """What every cluster's part of the view is read against."""

    listing: Sequence[Instance] | None  # None: vast could not be listed
    by_id: dict[int, Instance]
    lineage: str | None
    serving: list[InstanceRecord]  # the serving workers, for `kept_at_min_workers`
    specs: Mapping[str, ClusterSpec]
    now: float


def _cluster_names(
    records: Records,
    specs: Mapping[str, ClusterSpec],
    breakers: Mapping[str, Mapping[str, BreakerState]],
    now: float,
) -> list[str]:
    """The clusters shown: those of the specs, and any with live records, alerts, or a breaker
    worth showing."""
    return sorted(
        set(specs)
        | {r.cluster for r in records.live_instances()}
        | {a.cluster for a in records.alerts}
        | {
            cluster
            for cluster, states in breakers.items()
            if any(_breaker_shown(state, now) for state in states.values())
        }
    )


def _cluster(
    name: str, records: Records, seen: _Seen, breakers: Mapping[str, BreakerState]
) -> dict[str, Any]:
    """One cluster's part of the view: its instances, the foreign ones labelled for it (another
    state made them), its alerts and its breakers."""
    instances = [
        _instance(r.vast_id, r, seen.by_id, seen.now, seen.listing is not None)
        | {"kept_at_min_workers": idle.at_minimum(r, seen.serving, seen.specs)}
        for r in sorted(records.live_instances(name), key=lambda r: r.id)
    ]
    foreign = [
        _foreign(i)
        for i in seen.listing or ()
        if (info := parse_label(i.label))
        and info.cluster == name
        and (seen.lineage is None or info.lineage8 != seen.lineage[:8])
    ]
    spec = seen.specs.get(name)
    return {
        "name": name,
        "held_down_at": _held_down_at(records, name, spec),
        "cap_dollars_per_hour": spec.max_dollars_per_hour if spec else None,
        "ray": _ray(spec),
        "scheduling": spec.scheduling if spec else None,
        "chosen": _chosen(records, name),
        "dollars_per_hour": round(sum(i["dollars_per_hour"] for i in instances), 4),
        "instances": instances,
        "foreign_instances": foreign,
        "alerts": [_alert(a) for a in records.alerts if a.cluster == name],
        "breakers": [
            _breaker(node_type, state, spec, seen.now)
            for node_type, state in sorted(breakers.items())
        ],
    }


def _chosen(records: Records, cluster: str) -> list[dict[str, str]]:
    """Why each node type was launched by price, from its newest request that still counts (open,
    or with a live machine rented for it)."""
    live = {r.request_id for r in records.live_instances(cluster)}
    newest: dict[str, Request] = {}
    for request in records.requests.values():
        counts = request.status is RequestStatus.OPEN or request.id in live
        if request.cluster == cluster and request.chosen and counts:
            known = newest.get(request.node_type)
            if known is None or request.placed_at >= known.placed_at:
                newest[request.node_type] = request
    return [
        {"node_type": t, "request": r.id, "why": r.chosen or ""} for t, r in sorted(newest.items())
    ]


def _ray(spec: ClusterSpec | None) -> dict[str, str] | None:
    """Where the cluster's Ray head and its dashboard answer (`ray status`, `ray job submit`)."""
    if spec is None:
        return None
    head = spec.head
    return {"address": f"{head.address}:{head.ray_port}", "dashboard": head.dashboard_url}


def _held_down_at(records: Records, name: str, spec: ClusterSpec | None) -> float | None:
    """Since when `down` holds the cluster down (for the spec shown, when there is one)."""
    record = records.clusters.get(name)
    if record is None or record.down_at is None:
        return None
    return record.down_at if spec is None or record.holds_down(spec.digest) else None


def _instance(
    vast_id: int | None,
    record: InstanceRecord,
    by_id: dict[int, Instance],
    now: float,
    listed: bool,
) -> dict[str, Any]:
    seen = by_id.get(vast_id) if vast_id is not None else None
    because = (["ray_work"] if record.pinned else []) + (
        ["person"] if _person_pin_in_force(record, now) else []
    )
    return {
        "record": record.id,
        "node_type": record.node_type,
        "vast_id": vast_id,
        "role": record.role.value,
        "phase": record.phase.value,
        "intent": record.intent.value,
        "vast_status": (seen.actual_status if seen else ("missing" if listed else "unknown")),
        "age_seconds": round(now - record.created_at, 1),
        "dollars_per_hour": round(_rate(record, seen), 4),
        "host_id": record.host_id,
        "label": record.label,
        "lost": record.lost,
        # Ray reports work on the node (leased resources, actors, placement-group bundles).
        "pinned": record.pinned,
        # A person's pin as recorded (it may have ended: `held` says whether anything holds it).
        "pinned_by": record.pinned_by,
        "pinned_until": record.pinned_until,
        "held": record.held(now),
        "held_because": because,
        # The money chain (1.3): when the quiet worker's stop and destroy fall due (None: not
        # armed), and the agent's last sample (when, and whether it showed traffic);
        # `kept_at_min_workers` (added by `_cluster`): ending it would take its node type under
        # min_workers, so the money chain will not, armed or not.
        "stop_due_at": record.stop_due_at,
        "destroy_due_at": record.destroy_due_at,
        "sample_at": record.sample_at,
        "sample_busy": record.sample_busy if record.sample_at is not None else None,
    }


def _rate(record: InstanceRecord, seen: Instance | None) -> float:
    """What it bills now: as recorded, or storage alone when vast's listing already shows it
    stopped and the records have not caught up yet (the next reconcile records it)."""
    if seen is not None and seen.actual_status == "stopped" and record.billing_dph:
        return record.storage_dph
    return record.billing_dph


def _person_pin_in_force(record: InstanceRecord, now: float) -> bool:
    return record.pinned_by is not None and (
        record.pinned_until is None or now < record.pinned_until
    )


def _alert(alert: Alert) -> dict[str, Any]:
    return {
        "at": alert.at,
        "cluster": alert.cluster,
        "class": alert.cls,
        "record": alert.record,
        "message": alert.message,
    }


def _breakers_by_cluster(
    breakers: Mapping[str, BreakerState],
) -> dict[str, dict[str, BreakerState]]:
    """`cluster/node_type` keys, split (a cluster name never holds a `/`)."""
    out: dict[str, dict[str, BreakerState]] = {}
    for key, state in breakers.items():
        cluster, _, node_type = key.partition("/")
        out.setdefault(cluster, {})[node_type] = state
    return out


def _breaker_shown(state: BreakerState, now: float) -> bool:
    return state.count > 0 or _paused(state, now) or state.halt is not None


def _paused(state: BreakerState, now: float) -> bool:
    return state.paused_until is not None and state.paused_until > now


def _breaker(
    node_type: str, state: BreakerState, spec: ClusterSpec | None, now: float
) -> dict[str, Any]:
    return {
        "node_type": node_type,
        "paused": _paused(state, now),
        "paused_until": state.paused_until,
        # Slots in a row that ended with no worker since the last enrollment (or the last trip:
        # a trip starts the count again).
        "consecutive_empty": state.consecutive_empty,
        # Workers in a row that ended early (DESIGN.md 11); with the slots above, what opens it.
        "short_lives": state.short_lives,
        # Openings in a row with no serving worker between them (each doubles the pause), why
        # it last opened, and whether a worker of the configuration has served long enough to
        # lift the canary rule.
        "openings": state.openings,
        "reason": state.reason,
        "proven": state.proven,
        # The spec's threshold (known only when `status` is given the specs).
        "trips_after": spec.breaker.slots if spec else None,
        # A permanent failure of the node type: no rental until its image or env changes.
        "halted": _halted(node_type, state, spec),
        "halt": (
            {
                "at": state.halt.at,
                "class": state.halt.cls,
                "reason": state.halt.reason,
                "image": state.halt.image,
                "record": state.halt.record,
            }
            if state.halt is not None
            else None
        ),
    }


def _halted(node_type: str, state: BreakerState, spec: ClusterSpec | None) -> bool:
    """The halt holds while the node type's image and env are those it was halted for (a spec
    that changed them lifts it at the next reconcile); without the spec, as recorded."""
    if state.halt is None:
        return False
    declared = spec.node_types.get(node_type) if spec else None
    if declared is None:
        return True
    return state.halted(declared.ray_fingerprint)


def _foreign(instance: Instance) -> dict[str, Any]:
    return {
        "vast_id": instance.id,
        "label": instance.label,
        "vast_status": instance.actual_status,
        "dollars_per_hour": instance.dph_total or 0.0,
    }
