"""How an offer is picked (first seed, "How the provider picks an offer").

The search already carried the spec's filters and ours, but vast has been seen ignoring filters,
so every offer is checked again here. Then: cheapest `dph_total` first (not configurable), hosts
on the blocklist skipped, one candidate per machine per request, and an offer skipped when it would
take the cluster's total $/h above `max_dollars_per_hour`. Every skipped offer says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reconciler.model.observed import Offer
from reconciler.model.plan import OfferChoice, SkippedOffer
from reconciler.model.records import BlockEntry
from reconciler.model.spec import NodeType

# Ports a worker needs mapped: Ray's node manager, object manager, and a bounded worker range.
PORTS_PER_WORKER = 12
HOURS_PER_MONTH = 720.0


def storage_dph(offer: Offer, disk_gb: float) -> float:
    """The storage part of an offer's price for `disk_gb`, billed while the instance exists."""
    return (offer.storage_cost or 0.0) * disk_gb / HOURS_PER_MONTH


def unfit_reason(offer: Offer, node_type: NodeType) -> str | None:
    """Why an offer does not meet our own filters, or None when it does. Each reason is written
    only for an offer that fails it: every plan asks this of every offer of every node type
    (30,000 offers at 10,000 instances), nearly all of which pass."""
    if offer.rentable is False or offer.rented is True:
        return "not rentable"
    if offer.verification not in (None, "verified"):
        return f"host is {offer.verification}"
    floor = node_type.offer.min_reliability
    if (offer.reliability or 0.0) < floor:
        return f"reliability {offer.reliability} under {floor}"
    if (offer.disk_space or 0.0) < node_type.disk_gb:
        return f"disk {offer.disk_space} GB under {node_type.disk_gb} GB"
    if (offer.direct_port_count or 0) < PORTS_PER_WORKER:
        return f"{offer.direct_port_count} direct ports, {PORTS_PER_WORKER} needed"
    return None


@dataclass
class Budget:
    """The cluster's $/h as actions are planned, against its cap."""

    spent: float
    cap: float

    def fits(self, dph: float) -> bool:
        return self.spent + dph <= self.cap + 1e-9


@dataclass(frozen=True)
class Selection:
    chosen: tuple[OfferChoice, ...]
    skipped: tuple[SkippedOffer, ...]


def choose(
    offers: Iterable[Offer],
    *,
    cluster: str,
    node_type: NodeType,
    count: int,
    blocked: Mapping[int, BlockEntry],
    busy_machines: frozenset[int],
    budget: Budget,
) -> Selection:
    """Up to `count` offers in price order; `budget` is charged for each one chosen."""
    chosen: list[OfferChoice] = []
    skipped: list[SkippedOffer] = []
    machines = set(busy_machines)
    for offer in sorted(offers, key=lambda o: (o.dph_total, o.id)):
        if len(chosen) == count:
            break
        why = _skip_reason(offer, node_type, blocked, machines, budget)
        if why:
            skipped.append(
                SkippedOffer(cluster, node_type.name, offer.id, offer.host_id, offer.dph_total, why)
            )
            continue
        budget.spent += offer.dph_total
        machines.add(offer.machine_id)
        chosen.append(_choice(offer, node_type))
    return Selection(tuple(chosen), tuple(skipped))


def _skip_reason(
    offer: Offer,
    node_type: NodeType,
    blocked: Mapping[int, BlockEntry],
    machines: set[int],
    budget: Budget,
) -> str | None:
    if offer.host_id in blocked:
        entry = blocked[offer.host_id]
        return f"host {offer.host_id} blocklisted ({entry.reason})"
    if offer.machine_id in machines:
        return f"machine {offer.machine_id} already holds a candidate"
    unfit = unfit_reason(offer, node_type)
    if unfit:
        return unfit
    if not budget.fits(offer.dph_total):
        return (
            f"would take the cluster to ${budget.spent + offer.dph_total:.2f}/h, "
            f"over the cap ${budget.cap:.2f}/h"
        )
    return None


def _choice(offer: Offer, node_type: NodeType) -> OfferChoice:
    return OfferChoice(
        offer_id=offer.id,
        machine_id=offer.machine_id,
        host_id=offer.host_id,
        dph_total=offer.dph_total,
        storage_dph=storage_dph(offer, node_type.disk_gb),
        gpu_name=offer.gpu_name,
        num_gpus=offer.num_gpus,
        reliability=offer.reliability,
        geolocation=offer.geolocation,
    )
