"""Plan steps about machines we already have: detections, unfinished calls, restarts.

A detection becomes actions through the routing table only (DESIGN.md rule 8); a destroy that
failed earlier left its record `destroying`, and it is finished here rather than forgotten; a
machine is restarted only when its recorded intent is running (rule 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.model.observed import Instance
from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import Intent, Phase
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
            )
        if not (path.ends_machine or path.stops_machine or path.blocklist or path.alerts):
            draft.notes.append(f"{found.cls}: {record.id} ({found.detail})")


def finish_unfinished(
    draft: Draft, cluster: str, listing: Mapping[int, Instance], spec: ClusterSpec
) -> None:
    """Destroys that did not complete, and pending creates that never appeared."""
    for record in list(draft.instances.values()):
        if record.cluster != cluster or not record.live:
            continue
        if record.intent is Intent.DESTROYED:
            _finish_destroy(draft, record.id, listing, spec)
        elif record.phase is Phase.PENDING_CREATE:
            _expire_pending(draft, record.id, spec)


def _finish_destroy(
    draft: Draft, record_id: str, listing: Mapping[int, Instance], spec: ClusterSpec
) -> None:
    record = draft.instances[record_id]
    if record.vast_id is not None and record.vast_id in listing:
        draft.destroy(record, "finish_destroy", "an earlier destroy did not complete")
        return
    last = record.provider_seen_at or record.created_at
    if draft.now - last > spec.watchdogs.missing_from_listing_seconds:
        draft.update(record, phase=Phase.DESTROYED, ended_at=draft.now)


def _expire_pending(draft: Draft, record_id: str, spec: ClusterSpec) -> None:
    """A create whose instance never showed up in the listing within the orphan grace window."""
    record = draft.instances[record_id]
    if draft.now - record.created_at > spec.watchdogs.orphan_grace_seconds:
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
