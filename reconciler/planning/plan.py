"""The pure decision core: `plan(desired, observation, records, ...) -> Plan`.

It reads no clock and does no I/O: `now`, the listing, the offers and the demand are arguments.
A listing that could not be read completely makes a plan impossible, never "everything is gone"
(DESIGN.md rule 5). Order of work: refresh the records from the listing, run the listing checks,
finish what earlier runs left half-done, settle requests, scale, sweep orphans, then cost it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from reconciler.model.applied import downed_names
from reconciler.model.changes import Changes
from reconciler.model.diagnostics import Diagnostic, plan_error, plan_note, plan_warning
from reconciler.model.observation import Observation
from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind, ClusterCost, Detection, Foreign, Plan
from reconciler.model.records import InstanceRecord, Intent, Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets import candidate_limits
from reconciler.planning import lifecycle, orphans, pins, raydemand, requests, scaling
from reconciler.planning.draft import Draft
from reconciler.planning.offers import Budget
from reconciler.planning.refresh import refresh

# The ledger class (and alert) of a removed cluster's machine that a pin holds against the prune.
PRUNE_HELD = "prune_held"
# The reason of a destroy that `down` asked for (planning/teardown.py), or that its mark holds.
DOWN_REASON = "down"

# Order in which actions are carried out: free money before spending it.
ACTION_ORDER = {
    ActionKind.DESTROY: 0,
    ActionKind.STOP: 1,
    ActionKind.BLOCKLIST: 2,
    ActionKind.PAUSE: 3,
    ActionKind.MARK_LOST: 4,
    ActionKind.ADOPT: 5,
    ActionKind.FORGET: 6,
    ActionKind.START: 7,
    ActionKind.RENT: 8,
}


def plan(
    desired: Sequence[ClusterSpec],
    observation: Observation,
    records: Records,
    *,
    lineage: str,
    serial: int,
    now: float,
    sweep_orphans: bool = True,
    declared: Collection[str] | None = None,
) -> Plan:
    """The plan for `desired` given what was observed.

    The plan is about the clusters of `desired` and nothing else (DESIGN.md 10, "Scope of a
    plan"): a cluster outside it is neither kept nor retired. `declared` is every cluster name of
    a spec directory that loaded and validated completely; a cluster that has records but is no
    longer declared there is removed (Flux's prune) and joins the scope, except its machines
    that Ray work or a person's pin holds (`_retire`). Without `declared` nothing is pruned.
    `sweep_orphans` runs the orphan sweep (the watch controller asks for it on its own, slower
    cadence)."""
    if observation.listing is None:
        return _unplannable(observation, records, lineage=lineage, serial=serial, now=now)
    listing = observation.listing
    draft = _refreshed(observation, listing, records, lineage=lineage, now=now)
    specs = {s.name: s for s in desired}
    by_id = {i.id: i for i in listing}
    removed = _removed(draft, declared)
    down = _held_down(draft, records, specs)
    clusters = sorted(set(specs) | removed | down)
    unrecorded = orphans.unrecorded_dph(listing, draft.instances, lineage=lineage)
    before = {name: _cluster_dph(draft, name) + unrecorded.get(name, 0.0) for name in clusters}
    for spec in desired:
        _say_held_down(draft, records, spec)
        _plan_cluster(draft, spec, observation, by_id, before[spec.name])
    for name in sorted(removed | down):
        _retire(draft, name, by_id, down=name in down)
    foreign = _sweep(draft, listing, records, specs, scope=set(clusters), act=sweep_orphans)
    costs = [
        ClusterCost(
            name,
            before[name],
            before[name] + _delta(draft, name),
            specs[name].max_dollars_per_hour if name in specs else 0.0,
        )
        for name in clusters
    ]
    return _finished(draft, listing, costs, foreign, base=records, serial=serial)


def _unplannable(
    observation: Observation, records: Records, *, lineage: str, serial: int, now: float
) -> Plan:
    """The plan when vast's listing could not be read: no action, one error, the records as they
    were (an unknown listing is never "everything is gone")."""
    why = observation.listing_error or "the listing could not be read"
    return Plan(
        created_at=now,
        lineage=lineage,
        serial=serial,
        listing_fingerprint="",
        actions=(),
        costs=(),
        diagnostics=(
            plan_error(
                "listing_unknown", f"vast's instance listing is unknown ({why}); nothing is planned"
            ),
        ),
    )


def _refreshed(
    observation: Observation,
    listing: tuple[Instance, ...],
    records: Records,
    *,
    lineage: str,
    now: float,
) -> Draft:
    """The draft to plan on: the records refreshed from the listing, with the notes of the
    refresh and of the offer searches that failed."""
    refreshed, notes = refresh(records, listing, now)
    draft = Draft.start(refreshed, lineage=lineage, now=now)
    draft.notes.extend(notes)
    draft.notes.extend(
        plan_note("offer_search_failed", f"offer search for {c}/{n} failed: {why}")
        for (c, n), why in observation.search_errors.items()
    )
    return draft


def _sweep(
    draft: Draft,
    listing: Sequence[Instance],
    records: Records,
    specs: Mapping[str, ClusterSpec],
    *,
    scope: set[str],
    act: bool,
) -> list[Foreign]:
    """The orphan sweep: instances labelled ours with no live record are remembered from their
    first sight (the grace runs from there) and, when `act`, destroyed past it; those of our
    clusters under another state are returned, to be warned of and left alone."""
    seen = orphans.unrecorded(
        listing,
        draft.instances,
        lineage=draft.lineage,
        seen_before=records.unrecorded_seen,
        now=draft.now,
    )
    draft.records = replace(draft.records, unrecorded_seen=seen)
    sweep, foreign = orphans.sweep(
        listing,
        draft.instances,
        specs,
        lineage=draft.lineage,
        now=draft.now,
        scope=scope,
        first_seen=seen,
    )
    for action in sweep if act else ():
        draft.add(action)
        draft.detections.append(
            Detection(
                action.label or "", action.reason, action.detail, action.vast_id, action.cluster
            )
        )
    return foreign


def _finished(
    draft: Draft,
    listing: Sequence[Instance],
    costs: Sequence[ClusterCost],
    foreign: Sequence[Foreign],
    *,
    base: Records,
    serial: int,
) -> Plan:
    """The plan of a finished draft: its actions in the order they are carried out (free money
    before spending it; rents round by round, each open slot's first candidate before any slot's
    second, since vast sends one create every 4.5 s), and the fingerprint of the instances they
    touch."""
    actions = sorted(
        draft.actions, key=lambda a: (ACTION_ORDER[a.kind], draft.rounds.get(a.record or "", 0))
    )
    warnings = [_foreign_warning(f.cluster, f.vast_id, f.label, f.dph_total) for f in foreign]
    return Plan(
        created_at=draft.now,
        lineage=draft.lineage,
        serial=serial,
        listing_fingerprint=fingerprint(listing, touched(actions)),
        actions=tuple(actions),
        costs=tuple(costs),
        skipped=tuple(draft.skipped),
        foreign=tuple(foreign),
        diagnostics=(*warnings, *draft.notes),
        alerts=tuple(draft.alerts),
        detections=tuple(draft.detections),
        unmet=tuple(draft.unmet),
        changes=Changes.between(base, draft.finish()),
    )


def _plan_cluster(
    draft: Draft,
    spec: ClusterSpec,
    observation: Observation,
    by_id: Mapping[int, Instance],
    before: float,
) -> None:
    mine = [r for r in draft.of_cluster(spec.name) if r.live]
    detections = candidate_limits.detect(
        mine, by_id, {spec.name: spec}, lineage=draft.lineage, now=draft.now
    )
    lifecycle.apply_detections(draft, detections, spec)
    lifecycle.finish_unfinished(draft, spec.name, by_id, spec)
    lifecycle.end_stuck_starts(draft, spec, by_id)
    requests.settle_requests(draft, spec)
    lifecycle.restart_stopped(draft, spec.name)
    budget = Budget(spent=before + _delta(draft, spec.name), cap=spec.max_dollars_per_hour)
    frozen = raydemand.unreadable(draft, spec, observation)
    demand = raydemand.workers_wanted(draft, spec, observation, budget)
    for name, why in demand.chosen.items():
        draft.note("scheduling_cheapest", why, f"{spec.name}/{name}")
    for node_type in spec.node_types.values():
        key = (spec.name, node_type.name)
        scaling.scale(
            draft,
            spec,
            node_type,
            offers=observation.offers.get(key, ()),
            demand=demand.wanted.get(key, 0),
            budget=budget,
            frozen=frozen,
            chosen=demand.chosen.get(node_type.name),
        )


def _removed(draft: Draft, declared: Collection[str] | None) -> set[str]:
    """Clusters with live records of ours that a completely loaded directory no longer
    declares."""
    if declared is None:
        return set()
    return {
        r.cluster
        for r in draft.instances.values()
        if r.live and r.managed_by == draft.lineage and r.cluster not in declared
    }


def _say_held_down(draft: Draft, records: Records, spec: ClusterSpec) -> None:
    """A cluster `down` holds down, planned with its spec all the same (`plan` of the spec
    directory): carrying the plan out lifts the mark, which the plan says."""
    record = records.clusters.get(spec.name)
    if record is not None and record.holds_down(spec.digest):
        draft.note(
            "held_down",
            f"cluster {spec.name} is held down by `ray-vast down` (watch rents nothing for it);"
            " applying this plan brings it back",
        )


def _held_down(draft: Draft, records: Records, specs: Mapping[str, ClusterSpec]) -> set[str]:
    """Clusters with live records of ours that `down` holds down and that are not planned with
    a spec (`watch` leaves a held cluster out of its desired state): ended like a removed one,
    with no pin holding (`down` ends everything)."""
    held = downed_names(records) - set(specs)
    return {
        r.cluster
        for r in draft.instances.values()
        if r.live and r.managed_by == draft.lineage and r.cluster in held
    }


def _retire(
    draft: Draft, cluster: str, by_id: Mapping[int, Instance], *, down: bool = False
) -> None:
    """A cluster whose spec is gone from the directory is torn down, like a removed resource;
    destroys that failed earlier are finished here too (nobody else plans for this cluster).
    A cluster `down` holds down (`down`) is torn down the same way, with no pin holding.

    Pins hold against prune (DESIGN.md 11): a machine that Ray work or a person's pin holds
    (reaper gate 3, `InstanceRecord.held`) is not ended by a removed spec, which may be a
    rename or a mistake while a job runs; it is held with an alert and pruned by the first
    plan after the work or the pin ends. `down` (planning/teardown.py) is not a prune: it ends
    everything."""
    lifecycle.finish_unfinished(draft, cluster, by_id, None)
    for record in draft.of_cluster(cluster):
        if not record.live or record.intent is Intent.DESTROYED:
            continue
        if record.managed_by != draft.lineage:
            continue
        if record.vast_id is None:
            continue  # a pending create: adopted from the listing first, then retired
        gone = _proven_gone(record, by_id, draft.now)
        if gone is not None:  # not a prune: no guard holds it, nor a pin
            draft.destroy(record, gone[0], f"cluster {cluster} is no longer declared; {gone[1]}")
            continue
        if down:
            draft.destroy(record, DOWN_REASON, f"ray-vast down {cluster} holds it down")
            continue
        why = pins.holding(record, draft.now)
        if why is not None:
            _hold(draft, record, why)
            continue
        draft.destroy(record, "removed_from_spec", f"cluster {cluster} is no longer declared")


def _proven_gone(
    record: InstanceRecord, by_id: Mapping[int, Instance], now: float
) -> tuple[str, str] | None:
    """What vast's listing proves of a removed cluster's machine, as the limits of a declared one
    find it (`candidate_limits.PROVEN`): it runs nothing (missing for the window, or exited), so
    its record is closed whatever a pin or the mass-destroy guard holds (the adversary's seed
    186: a held worker that had destroyed itself stayed live to the end of the run, priced as
    running, as no spec's limits looked at it)."""
    seen = by_id.get(record.vast_id) if record.vast_id is not None else None
    if seen is not None:
        return ("exited", "vast lists it exited") if seen.actual_status == "exited" else None
    return candidate_limits.missing_finding(record, lifecycle.DEFAULT_MISSING_SECONDS, now)


def _hold(draft: Draft, record: InstanceRecord, why: str) -> None:
    """A removed cluster's machine kept for what holds it: an alert for a person (`status`),
    with its line in the ledger and the log, raised once (again after an hour while it holds),
    and a note in every plan meanwhile (so `ray-vast plan` says why it is not destroyed)."""
    found = Detection(
        record.id,
        PRUNE_HELD,
        f"cluster {record.cluster} is no longer declared, but {why} holds instance "
        f"{record.vast_id}: it is pruned when that ends (`ray-vast down {record.cluster}` "
        "ends it now)",
        record.vast_id,
        record.cluster,
    )
    if draft.alert(record.cluster, found):
        draft.detections.append(found)
    else:
        draft.note(PRUNE_HELD, f"{PRUNE_HELD}: {found.detail} ({record.id})")


def _cluster_dph(draft: Draft, cluster: str) -> float:
    return sum(r.billing_dph for r in draft.of_cluster(cluster) if r.live)


def _delta(draft: Draft, cluster: str) -> float:
    return sum(a.dph_delta for a in draft.actions if a.cluster == cluster)


def _foreign_warning(cluster: str, vast_id: int, label: str, dph: float) -> Diagnostic:
    return plan_warning(
        "foreign",
        f"instance {vast_id} ({label}, ${dph:.2f}/h) belongs to cluster {cluster} under another "
        f"state; ray-vast will not touch it (`ray-vast down {cluster}` ends it)",
    )


def touched(actions: Sequence[Action]) -> frozenset[int]:
    """The vast ids a plan's actions act on."""
    return frozenset(a.vast_id for a in actions if a.vast_id is not None)


def fingerprint(listing: Sequence[Instance], ids: frozenset[int]) -> str:
    """A digest of what a plan saw of the instances it touches, to refuse it after they change."""
    rows = sorted(
        (i.id, i.label or "", i.actual_status or "", i.public_ipaddr or "")
        for i in listing
        if i.id in ids
    )
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
