"""A scale-up's record: the n slots of one request for one node type (DESIGN.md section 3).

Split from `model/records.py` (which re-exports these names): a request is what the planner
places and the executor fills, and it carries why its node type was chosen (`chosen`) where
the cluster's scheduling picked it by price.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RequestStatus(StrEnum):
    OPEN = "open"
    FILLED = "filled"
    EXPIRED = "expired"
    RELEASED = "released"
    FAILED = "failed"


@dataclass(frozen=True)
class Slot:
    id: str
    worker: str | None = None
    ended_without_worker: bool = False


@dataclass(frozen=True)
class Request:
    """The n slots of one scale-up of one node type; the deadline is fixed when placed."""

    id: str
    cluster: str
    node_type: str
    managed_by: str
    placed_at: float
    provision_deadline: float
    slots: tuple[Slot, ...]
    status: RequestStatus = RequestStatus.OPEN
    # When a candidate was first rented for it; None while it waits in the queue.
    dispatched_at: float | None = None
    # Since when it waits in the queue: placed, or put back by the stuck-dispatch reset.
    queued_at: float | None = None
    # Why the last attempt to rent for it rented nothing (no acceptable offer, creates failing).
    dispatch_error: str | None = None
    ended_reason: str | None = None
    # The node type's image, and the fingerprint of its image and env (`rayversions.fingerprint`),
    # when the request was placed: what its candidates run, even after the spec changes (a halt
    # for their failure is bound to this, not to the spec as it is later). None: placed before
    # these were recorded (read as the spec's current ones).
    image: str | None = None
    fingerprint: str | None = None
    # The node type's configuration digest when placed (`NodeType.digest`): the breaker counts
    # the request's slots, and its candidates' blocklist entries, against this configuration.
    digest: str | None = None
    # Why its node type was launched by price (`scheduling: cheapest`: its price per request
    # against the other node types'); None: Ray's own choice.
    chosen: str | None = None

    @property
    def ended_by_watchdog(self) -> bool:
        """Ended by a request watchdog (pool idle release, queue wait, no consumer): those end
        requests only, never a machine (seed 2), so its live candidates keep their own limits
        and may still join as the workers of its open slots (DESIGN.md 11)."""
        return (
            self.status in (RequestStatus.RELEASED, RequestStatus.FAILED)
            and self.ended_reason in REQUEST_WATCHDOG_CLASSES
        )

    @property
    def open_slots(self) -> tuple[Slot, ...]:
        return tuple(s for s in self.slots if s.worker is None and not s.ended_without_worker)

    @property
    def waiting_since(self) -> float:
        return self.queued_at if self.queued_at is not None else self.placed_at


# The ledger classes of the request watchdogs that end a request (reconciler/nets/pools.py).
REQUEST_WATCHDOG_CLASSES = frozenset({"pool_idle_release", "queue_wait_timeout", "no_consumer"})
