"""ray-vast's autoscaling state, written in Ray's protobuf for the head's GCS (issue 24).

`model/autoscaling.py` says what to tell Ray; this module writes it as autoscaler v2 writes its
`AutoscalingState` (`ray/autoscaler/v2/instance_manager/reconciler.py`) for
`GcsClient.report_autoscaling_state`. The GCS keeps the report with the highest
`autoscaler_state_version`, so the version is the report's time in milliseconds: it only grows,
also across a restart of the watch.
"""

from __future__ import annotations

from typing import Any

from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import Unmet


def encoded(state: AutoscalerState, *, now: float, seen_version: int) -> bytes:
    """The state as the bytes `report_autoscaling_state` takes."""
    from ray.core.generated import autoscaler_pb2 as pb  # noqa: PLC0415 - Ray is heavy

    message: Any = pb.AutoscalingState(  # type: ignore[attr-defined]
        last_seen_cluster_resource_state_version=seen_version,
        autoscaler_state_version=int(now * 1000),
    )
    for request in state.requests:
        message.pending_instance_requests.append(
            pb.PendingInstanceRequest(  # type: ignore[attr-defined]
                instance_type_name="vast offer",
                ray_node_type_name=request.node_type,
                count=request.count,
                request_ts=int(request.requested_at),
            )
        )
    for launch in state.pending:
        message.pending_instances.append(
            pb.PendingInstance(  # type: ignore[attr-defined]
                instance_type_name=launch.instance_type,
                ray_node_type_name=launch.node_type,
                instance_id=launch.instance_id,
                ip_address=launch.ip,
                details=f"{launch.details} (ray-vast)",
            )
        )
    for failed in state.failed:
        message.failed_instance_requests.append(
            pb.FailedInstanceRequest(  # type: ignore[attr-defined]
                instance_type_name=failed.instance_type,
                ray_node_type_name=failed.node_type,
                count=1,
                reason=failed.reason,
                start_ts=int(failed.started_at),
                failed_ts=int(failed.failed_at),
            )
        )
    for unmet in state.infeasible:
        _infeasible(pb, message, unmet)
    return bytes(message.SerializeToString())


def _infeasible(pb: Any, message: Any, unmet: Unmet) -> None:
    """Demand no node type holds, in the field Ray's autoscaler puts it in."""
    requests = [pb.ResourceRequest(resources_bundle=dict(b)) for b in unmet.bundles]
    if unmet.kind == "placement_group":
        message.infeasible_gang_resource_requests.append(
            pb.GangResourceRequest(requests=requests, details=f"{unmet.placement_group}")
        )
    elif unmet.kind == "request_resources":
        by_count = [pb.ResourceRequestByCount(request=r, count=unmet.count) for r in requests]
        message.infeasible_cluster_resource_constraints.append(
            pb.ClusterResourceConstraint(resource_requests=by_count)
        )
    else:
        message.infeasible_resource_requests.extend(requests * unmet.count)
