"""Plan steps about machines we already have: detections, unfinished calls, restarts.

A detection becomes actions through the routing table only (DESIGN.md rule 8); a destroy that
failed earlier left its record `destroying`, and it is finished here rather than forgotten; a
machine is restarted only when its recorded intent is running (rule 3).

A deliberate stop keeps the disk (DESIGN.md 10), so demand that returns before the destroy timer
starts a stopped worker again rather than renting (`start_for_demand`): its intent goes back to
running in the plan's records, before the call to vast, and that is what lets its agent resume
with its kept certificate. A start that vast cannot carry out (it keeps the instance in
`scheduling` while another rental holds its GPU) is given `start_limit_seconds`; then it is
destroyed and, the worker being gone, the planner rents a replacement (`end_stuck_starts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.model import stopping, stretches
from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.routing import route
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, refusal
from reconciler.planning import handshake
from reconciler.planning.draft import Draft
from reconciler.planning.offers import Budget

START_STUCK = "start_stuck"


def apply_detections(draft: Draft, detections: Iterable[Detection], spec: ClusterSpec) -> None:
    """Each detection through the routing table: destroy, stop, blocklist, alert, or a note."""
    for found in detections:
        draft.detections.append(found)
        path = route(found.cls)
        if path.alerts:
            draft.alert(spec.name, found)
        record = draft.instances.get(found.record)
        if record is None:
            continue
        if path.ends_machine:
            draft.destroy(record, found.cls, found.detail)
        if path.stops_machine:
            handshake.stop(draft, record, found.cls, found.detail)
        if path.blocklist:
            seconds = getattr(spec.blocklist, path.blocklist)
            draft.block(
                record.cluster,
                record.host_id,
                kind=path.blocklist,
                seconds=seconds,
                cls=found.cls,
                why=found.detail,
                node_type=record.node_type,
                digest=_digest(draft, record, spec),
            )
        if not (path.ends_machine or path.stops_machine or path.blocklist or path.alerts):
            draft.note(found.cls, f"{found.cls}: {record.id} ({found.detail})")


def _digest(draft: Draft, record: InstanceRecord, spec: ClusterSpec) -> str | None:
    """The configuration a record was rented under: its request's, else the node type's now."""
    request = draft.requests.get(record.request_id) if record.request_id else None
    if request is not None and request.digest is not None:
        return request.digest
    node_type = spec.node_types.get(record.node_type)
    return node_type.digest if node_type is not None else None


def finish_unfinished(
    draft: Draft, cluster: str, listing: Mapping[int, Instance], spec: ClusterSpec | None
) -> None:
    """Transitional states nobody else finishes: destroys and stops vast has not confirmed (sent
    again with backoff until it does), and pending creates that never appeared. `spec` is None
    for a cluster removed from the specs: the defaults of the seed's windows apply."""
    missing = spec.watchdogs.missing_from_listing_seconds if spec else DEFAULT_MISSING_SECONDS
    grace = spec.watchdogs.orphan_grace_seconds if spec else DEFAULT_ORPHAN_GRACE_SECONDS
    for record in draft.of_cluster(cluster):
        if not record.live:
            continue
        if record.intent is Intent.DESTROYED:
            _finish(draft, record, listing, missing, ActionKind.DESTROY)
        elif stopping.in_handshake(record) and record.vast_id in listing:
            continue  # asked of the agent, not called yet: the handshake's, not unfinished
        elif record.intent is Intent.STOPPED and record.phase is not Phase.STOPPED:
            _finish(draft, record, listing, missing, ActionKind.STOP)
        elif record.phase is Phase.PENDING_CREATE:
            _expire_pending(draft, record.id, grace)


DEFAULT_MISSING_SECONDS = 60
DEFAULT_ORPHAN_GRACE_SECONDS = 600


def _finish(
    draft: Draft,
    record: InstanceRecord,
    listing: Mapping[int, Instance],
    missing: float,
    kind: ActionKind,
) -> None:
    """Send a destroy or stop again when its backoff has passed and vast still lists the instance;
    close the record once vast's listings have not shown it for the missing window."""
    if record.vast_id is not None and record.vast_id in listing:
        if record.retry_at is not None and draft.now < record.retry_at:
            return
        tries = f"call {record.call_attempts + 1}"
        if kind is ActionKind.DESTROY:
            why = f"an earlier destroy did not complete ({tries})"
            draft.destroy(record, "finish_destroy", why)
        else:
            draft.stop(record, "finish_stop", f"vast has not stopped it yet ({tries})")
        return
    last = record.provider_seen_at or record.created_at
    if kind is ActionKind.STOP:
        # a machine we only stopped is alive until vast's listings have not shown it for the
        # missing window (rule 5), not one listing after a quiet minute: the adversary (seed 87)
        # saw a stopping worker missing from one listing closed as gone, its certificate
        # revoked, and the healthy worker end itself on the 403
        last = record.missing_since if record.missing_since is not None else draft.now
    if draft.now - last >= missing:
        ended = "gone from vast's listing" + (" while stopping" if kind is ActionKind.STOP else "")
        at = stretches.vanished_at(record, draft.now)
        draft.update(record.closed(at, record.ended_reason or ended, retry_at=None))


def _expire_pending(draft: Draft, record_id: str, grace: float) -> None:
    """A create whose instance never showed up in the listing within the orphan grace window."""
    record = draft.instances[record_id]
    if draft.now - record.created_at >= grace:
        draft.update(record.closed(draft.now, "create never appeared in the listing"))
        draft.note(
            "create_never_appeared", f"pending create {record.id} never appeared; record closed"
        )


def restart_stopped(draft: Draft, cluster: str) -> None:
    """Machines vast stopped (outbid, balance) whose recorded intent is still running."""
    for record in draft.of_cluster(cluster):
        if (
            record.live
            and record.intent is Intent.RUNNING
            and record.phase is Phase.STOPPED
            and record.id not in draft.doomed
        ):
            draft.add(
                Action(
                    ActionKind.START,
                    cluster,
                    "restart",
                    "stopped by vast while its intent is running",
                    node_type=record.node_type,
                    record=record.id,
                    vast_id=record.vast_id,
                    dph_delta=record.dph_total - record.storage_dph,
                )
            )


def resumable(record: InstanceRecord) -> bool:
    """A worker stopped deliberately that a start brings back as it was: its agent kept its
    identity (the head answered its stop as deliberate), or will (it acknowledged the stop:
    DESIGN.md 11), or it has no agent (an exempt class, whose container simply starts again)."""
    return (
        record.live
        and record.role is Role.WORKER
        and record.intent is Intent.STOPPED
        and record.vast_id is not None
        and (
            record.exempt
            or record.stopped_deliberately_at is not None
            or record.stop_acked_at is not None
        )
    )


def start_for_demand(
    draft: Draft, spec: ClusterSpec, node_type: NodeType, wanted: int, budget: Budget
) -> int:
    """Start up to `wanted` of the node type's stopped workers (the most recently stopped first:
    the least storage paid, the freshest disk) and say how many of the shortfall they cover.
    One whose stop vast has not confirmed yet covers its share without a call (it is started
    at a later plan, once stopped), so demand that returns during a stop rents nothing."""
    if wanted <= 0:
        return 0
    covered = 0
    for record in _resumable_workers(draft, spec, node_type):
        if covered >= wanted:
            break
        if record.phase is Phase.STOPPING:
            covered += 1
            continue
        if record.phase is not Phase.STOPPED:
            continue
        extra = record.dph_total - record.storage_dph
        if not budget.fits(extra):
            draft.note(
                "stays_stopped",
                f"{record.id} stays stopped: starting it would "
                f"take the cluster to ${budget.spent + extra:.2f}/h, over the cap "
                f"${budget.cap:.2f}/h",
                f"{spec.name}/{node_type.name}",
            )
            continue
        budget.spent += extra
        covered += 1
        _resume(draft, spec, record, extra)
    return covered


def _resumable_workers(
    draft: Draft, spec: ClusterSpec, node_type: NodeType
) -> list[InstanceRecord]:
    """The node type's workers of ours that a start would bring back, the most recently stopped
    first."""
    return sorted(
        (
            r
            for r in draft.of_node_type(spec.name, node_type.name)
            if r.id not in draft.doomed and r.managed_by == draft.lineage and resumable(r)
        ),
        key=lambda r: (r.stopped_deliberately_at or 0.0, r.id),
        reverse=True,
    )


def _resume(draft: Draft, spec: ClusterSpec, record: InstanceRecord, extra: float) -> None:
    """A stopped worker started again for demand: its intent running (its money-chain timers
    cleared), and the start that brings it back (`extra` is what it costs beyond its storage)."""
    draft.update(stopping.resumed(record, draft.now))
    why = (
        "demand returned before the destroy timer: started again with its disk "
        "(no new rental, no pull)"
    )
    draft.add(Action.on(ActionKind.START, record, "resume", why, extra))


def end_stuck_starts(draft: Draft, spec: ClusterSpec, listing: Mapping[int, Instance]) -> None:
    """A start vast has not got running within `start_limit_seconds` (its GPU was taken
    meanwhile: vast says `scheduling`) ends the machine; the planner then rents a replacement,
    the worker being gone."""
    limit = spec.watchdogs.start_limit_seconds
    found = []
    for record in draft.of_cluster(spec.name):
        if (
            record.exempt
            and record.start_requested_at is not None
            and record.phase in (Phase.RUNNING, Phase.ENROLLED, Phase.SERVING)
        ):
            # no agent resumes it: running is as far as the start can be seen to get
            draft.update(record, start_requested_at=None)
            continue
        due = start_deadline(record, spec)
        if due is None or draft.now < due:
            continue
        if refusal(record, lineage=draft.lineage, now=draft.now, gate=Gate()) is not None:
            continue
        seen = listing.get(record.vast_id) if record.vast_id is not None else None
        status = (seen.actual_status if seen is not None else None) or "not listed"
        since = draft.now - (record.start_requested_at or draft.now)
        detail = f"started {since:.0f}s ago and vast still says {status} (limit {limit}s)"
        if seen is not None and seen.status_msg:
            detail += f": {seen.status_msg}"
        found.append(Detection(record.id, START_STUCK, detail, record.vast_id))
    apply_detections(draft, found, spec)


def start_deadline(record: InstanceRecord, spec: ClusterSpec) -> float | None:
    """When a start of this record is stuck (None: no start is waiting for vast). The
    controller lists then, so the limit fires within seconds of its threshold."""
    if (
        not record.live
        or record.intent is not Intent.RUNNING
        or record.start_requested_at is None
        or record.phase not in (Phase.PULLING, Phase.STOPPED)
    ):
        return None
    return record.start_requested_at + spec.watchdogs.start_limit_seconds
