"""Read what the plan needs from vast: one complete listing, and offers where candidates are due.

Offers are searched only for node types the planner could not fill without them, so a quiet
cluster costs one listing per reconcile and no search (vast allows few searches a minute). A
listing error is returned as "unknown", never as an empty listing.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from reconciler.applying.provider import Provider
from reconciler.applying.search import offer_search
from reconciler.model.demand import RayReport
from reconciler.model.observation import NodeKey, Observation
from reconciler.model.observed import Offer
from reconciler.model.plan import Plan
from reconciler.model.records import Intent, Records
from reconciler.model.spec import ClusterSpec
from reconciler.planning.plan import plan as make_plan
from reconciler.vast.errors import VastError

# How many of the instances an empty listing left out are looked up one by one to tell an empty
# account from a listing that came back empty by mistake.
EMPTY_LISTING_PROBES = 3


def listing(provider: Provider, records: Records | None = None) -> Observation:
    """One complete listing, or "unknown" (DESIGN.md rule 5). A listing that comes back empty
    while we hold live instances is believed only after a few of them are confirmed gone one by
    one: an empty page is also what a broken listing looks like."""
    try:
        rows = tuple(provider.list_instances())
    except VastError as exc:
        return Observation(listing=None, listing_error=str(exc))
    expected = _expected(records) if records is not None and not rows else []
    for vast_id in expected[:EMPTY_LISTING_PROBES]:
        try:
            shown = provider.show_instance(vast_id)
        except VastError as exc:
            return Observation(listing=None, listing_error=f"empty listing, and {exc}")
        if shown is not None:
            return Observation(
                listing=None,
                listing_error=f"the listing came back empty but instance {vast_id} exists",
            )
    return Observation(listing=rows)


def _expected(records: Records) -> list[int]:
    return sorted(
        r.vast_id
        for r in records.instances.values()
        if r.live and r.vast_id is not None and r.intent is not Intent.DESTROYED
    )


def search(
    provider: Provider, specs: Sequence[ClusterSpec], keys: set[NodeKey]
) -> tuple[dict[NodeKey, tuple[Offer, ...]], dict[NodeKey, str]]:
    """Offers per node type, and the searches that failed (those rent nothing this time)."""
    found: dict[NodeKey, tuple[Offer, ...]] = {}
    failed: dict[NodeKey, str] = {}
    by_name = {s.name: s for s in specs}
    for cluster, node_type in sorted(keys):
        query = offer_search(by_name[cluster].node_types[node_type])
        try:
            found[(cluster, node_type)] = tuple(provider.search_offers(query))
        except VastError as exc:
            failed[(cluster, node_type)] = str(exc)
    return found, failed


def observe_and_plan(
    provider: Provider,
    specs: Sequence[ClusterSpec],
    records: Records,
    *,
    lineage: str,
    serial: int,
    now: float,
    ray: Mapping[str, RayReport] | None = None,
    ray_unread_since: Mapping[str, float] | None = None,
    sweep_orphans: bool = True,
    declared: Collection[str] | None = None,
    settle: Settle | None = None,
) -> Plan:
    """List, plan without offers, search where candidates were wanted, plan again. `declared`:
    every cluster of a completely loaded spec directory (those it lacks are pruned).

    `records` is what the listing is read against. `settle` runs the final planning on the records
    as they are then (under the records lock, and commits it in the same hold), so the calls to
    vast (listing, offer search) never hold the lock and nothing that changed meanwhile (a
    heartbeat, an enrollment) is planned over; without it the final plan uses `records`."""
    seen = listing(provider, records)
    seen = Observation(
        seen.listing,
        ray=dict(ray or {}),
        listing_error=seen.listing_error,
        ray_unread_since=dict(ray_unread_since or {}),
    )

    def planned(observation: Observation) -> Callable[[Records], Plan]:
        def on(current: Records) -> Plan:
            return make_plan(
                specs,
                observation,
                current,
                lineage=lineage,
                serial=serial,
                now=now,
                sweep_orphans=sweep_orphans,
                declared=declared,
            )

        return on

    final: Settle = settle or (lambda plan_on: plan_on(records))
    first = planned(seen)(records)
    if first.errored or not first.unmet:
        return final(planned(seen)) if settle else first
    keys = _priced_too(specs, {(u.cluster, u.node_type) for u in first.unmet})
    offers, failed = search(provider, specs, keys)
    full = replace(seen, offers=offers, search_errors=failed)
    # Priced, a budget that binds can move Ray's demand onto a node type the unpriced first plan
    # did not search (the GPU nodes cost too much; CPU nodes serve part of it): search it too.
    more = {(u.cluster, u.node_type) for u in planned(full)(records).unmet} - keys
    if more:
        extra, extra_failed = search(provider, specs, more)
        full = replace(full, offers={**offers, **extra}, search_errors={**failed, **extra_failed})
    return final(planned(full))


def _priced_too(specs: Sequence[ClusterSpec], keys: set[NodeKey]) -> set[NodeKey]:
    """The node types to search: those short of candidates and, in a cluster that schedules by
    price (`scheduling: cheapest`), all of its node types (the packing compares their prices;
    unpriced, Ray's own choice is the only one that looks short)."""
    short = {cluster for cluster, _ in keys}
    return keys | {
        (s.name, name)
        for s in specs
        if s.name in short and s.scheduling == "cheapest"
        for name in s.node_types
    }


# Runs a planning step on the current records and commits its plan (see `observe_and_plan`).
Settle = Callable[[Callable[[Records], Plan]], Plan]
