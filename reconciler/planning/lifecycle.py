"""Plan steps about machines we already have: detections, unfinished calls, restarts.

A detection becomes actions through the routing table only (DESIGN.md rule 8); a destroy that
failed earlier left its record `destroying`, and it is finished here rather than forgotten; a
machine is restarted only when its recorded intent is running (rule 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import InstanceRecord, Intent, Phase
from reconciler.model.routing import route
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection
from reconciler.planning.draft import Draft


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
            draft.stop(record, found.cls, found.detail)
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
            )
        if not (path.ends_machine or path.stops_machine or path.blocklist or path.alerts):
            draft.notes.append(f"{found.cls}: {record.id} ({found.detail})")


def finish_unfinished(
    draft: Draft, cluster: str, listing: Mapping[int, Instance], spec: ClusterSpec | None
) -> None:
    """Transitional states nobody else finishes: destroys and stops vast has not confirmed (sent
    again with backoff until it does), and pending creates that never appeared. `spec` is None
    for a cluster removed from the specs: the defaults of the seed's windows apply."""
    missing = spec.watchdogs.missing_from_listing_seconds if spec else DEFAULT_MISSING_SECONDS
    grace = spec.watchdogs.orphan_grace_seconds if spec else DEFAULT_ORPHAN_GRACE_SECONDS
    for record in list(draft.instances.values()):
        if record.cluster != cluster or not record.live:
            continue
        if record.intent is Intent.DESTROYED:
            _finish(draft, record, listing, missing, ActionKind.DESTROY)
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
    if draft.now - last >= missing:
        ended = "gone from vast's listing" + (" while stopping" if kind is ActionKind.STOP else "")
        draft.update(
            record,
            phase=Phase.DESTROYED,
            intent=Intent.DESTROYED,
            ended_at=draft.now,
            ended_reason=record.ended_reason or ended,
            retry_at=None,
        )


def _expire_pending(draft: Draft, record_id: str, grace: float) -> None:
    """A create whose instance never showed up in the listing within the orphan grace window."""
    record = draft.instances[record_id]
    if draft.now - record.created_at >= grace:
        draft.update(
            record,
            phase=Phase.DESTROYED,
            intent=Intent.DESTROYED,
            ended_at=draft.now,
            ended_reason="create never appeared in the listing",
        )
        draft.notes.append(f"pending create {record.id} never appeared; record closed")


def restart_stopped(draft: Draft, cluster: str) -> None:
    """Machines vast stopped (outbid, balance) whose recorded intent is still running."""
    for record in draft.instances.values():
        if (
            record.cluster == cluster
            and record.live
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
