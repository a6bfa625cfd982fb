"""What ray-vast tells Ray as its autoscaler (issue 24): Ray's autoscaler v2 autoscaling state.

Ray's head learns what its autoscaler is doing from the `AutoscalingState` the autoscaler
reports to the GCS, and `ray status` prints it ("Pending:", "Recent failures:"). ray-vast is the
autoscaler of its clusters, so it reports the same things, read from its records:

- a pending instance request (Ray: a launch requested, no instance yet) per node type: the open
  slots of open requests that no live candidate is renting for;
- a pending instance (Ray: allocated, Ray not running yet) per machine rented whose Ray node
  Ray does not show yet: the vast instance id, its offer as the instance type, where it is in its
  start (renting, pulling the image, enrolled and starting Ray);
- a failed instance request per rental that ended by a fault without a worker in the last
  `FAILED_WINDOW_SECONDS` (Ray shows recent failures), with the reason; an extra candidate
  ended because another one won its slot, or a deliberate end, is no failure;
- the demand that fits no node type (the packing's infeasible part).

Plain data here; `watch/rayreport.py` writes it in Ray's protobuf and sends it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from reconciler.model.demand import Unmet
from reconciler.model.records import InstanceRecord, Phase, Records, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.model.routing import ROUTES, Outcome

# How long a failed rental stays in Ray's "Recent failures".
FAILED_WINDOW_SECONDS = 900.0
_STARTING = {
    Phase.PENDING_CREATE: "renting at vast",
    Phase.RENTING: "renting at vast",
    Phase.PULLING: "pulling the image",
    Phase.RUNNING: "booting the agent",
    Phase.ENROLLED: "enrolled, starting Ray",
}


@dataclass(frozen=True)
class PendingRequest:
    """Launches asked for and not yet rented (Ray's `PendingInstanceRequest`)."""

    node_type: str
    count: int
    requested_at: float


@dataclass(frozen=True)
class PendingLaunch:
    """A machine rented whose Ray has not joined (Ray's `PendingInstance`)."""

    node_type: str
    instance_id: str
    instance_type: str
    ip: str
    details: str


@dataclass(frozen=True)
class FailedLaunch:
    """A rental that ended without a worker (Ray's `FailedInstanceRequest`)."""

    node_type: str
    instance_type: str
    reason: str
    started_at: float
    failed_at: float


@dataclass(frozen=True)
class AutoscalerState:
    """One cluster's autoscaling state as Ray's autoscaler v2 reports it."""

    requests: tuple[PendingRequest, ...] = ()
    pending: tuple[PendingLaunch, ...] = ()
    failed: tuple[FailedLaunch, ...] = ()
    infeasible: tuple[Unmet, ...] = ()


def autoscaler_state(
    cluster: str,
    records: Records,
    infeasible: Sequence[Unmet],
    now: float,
    *,
    in_ray: Collection[str] = (),
) -> AutoscalerState:
    """What ray-vast is doing for `cluster`, in the terms of Ray's autoscaling state; `in_ray`:
    the records whose node Ray shows (their `rv_record` label), which are no longer pending."""
    mine = [r for r in records.instances.values() if r.cluster == cluster]
    live = [
        r
        for r in mine
        if r.live and r.serving_at is None and r.phase in _STARTING and r.id not in in_ray
    ]
    renting: Counter[str] = Counter(r.request_id for r in live if r.request_id)
    requests = []
    for request in records.requests.values():
        if request.cluster != cluster or request.status is not RequestStatus.OPEN:
            continue
        waiting = len(request.open_slots) - renting[request.id]
        if waiting > 0:
            requests.append(PendingRequest(request.node_type, waiting, request.placed_at))
    pending = tuple(
        PendingLaunch(
            r.node_type,
            str(r.vast_id) if r.vast_id is not None else r.id,
            instance_type(r),
            r.public_ip or "",
            _STARTING[r.phase],
        )
        for r in sorted(live, key=lambda r: r.created_at)
    )
    failed = tuple(
        FailedLaunch(
            r.node_type, instance_type(r), r.ended_reason or "ended", r.created_at, r.ended_at
        )
        for r in sorted(mine, key=lambda r: r.created_at)
        if r.role is Role.CANDIDATE
        and r.serving_at is None
        and r.ended_at is not None
        and now - r.ended_at <= FAILED_WINDOW_SECONDS
        and _a_fault(r.ended_reason)
    )
    return AutoscalerState(tuple(requests), pending, failed, tuple(infeasible))


def _a_fault(reason: str | None) -> bool:
    """Whether an ending was a fault: its class leads somewhere (a replacement, a blocklist, a
    person), not to nothing (an extra candidate, a scale-down, a `down`)."""
    route = ROUTES.get(reason or "")
    return route is None or route.outcomes != (Outcome.NOTHING,)


def instance_type(record: InstanceRecord) -> str:
    """The instance type Ray shows for a rental: the vast offer it came from, at its price."""
    offer = f"vast offer {record.offer_id}"
    return f"{offer} (${record.dph_total:.3f}/h)" if record.dph_total else offer
