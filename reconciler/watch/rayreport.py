"""ray-vast's autoscaling state, written in Ray's protobuf for the head's GCS (issue 24).

`model/autoscaling.py` says what to tell Ray; this module writes it as autoscaler v2 writes its
`AutoscalingState` (`ray/autoscaler/v2/instance_manager/reconciler.py`) for
`GcsClient.report_autoscaling_state`. The GCS keeps the report with the highest
`autoscaler_state_version`, so the version is the report's time in milliseconds: it only grows,
also across a restart of the watch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import Unmet


class Infeasible(NamedTuple):
    """Demand no node type holds, in the three kinds Ray's autoscaler v2 tells apart (the
    fields of its `AutoscalingState`, and the arguments of its event logger)."""

    requests: list[Any]  # ResourceRequest, one per task
    gangs: list[Any]  # GangResourceRequest, one per placement group
    constraints: list[Any]  # ClusterResourceConstraint, one per request_resources() call


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
    said = infeasible(state.infeasible)
    message.infeasible_resource_requests.extend(said.requests)
    message.infeasible_gang_resource_requests.extend(said.gangs)
    message.infeasible_cluster_resource_constraints.extend(said.constraints)
    return bytes(message.SerializeToString())


def infeasible(unmet: Sequence[Unmet]) -> Infeasible:
    """Demand no node type holds, in Ray's protobuf, each kind where Ray's autoscaler puts it."""
    from ray.core.generated import autoscaler_pb2 as pb  # noqa: PLC0415 - Ray is heavy

    out = Infeasible([], [], [])
    for each in unmet:
        requests = [pb.ResourceRequest(resources_bundle=dict(b)) for b in each.bundles]  # type: ignore[attr-defined]
        if each.kind == "placement_group":
            gang = pb.GangResourceRequest(requests=requests, details=f"{each.placement_group}")  # type: ignore[attr-defined]
            out.gangs.append(gang)
        elif each.kind == "request_resources":
            by_count = [pb.ResourceRequestByCount(request=r, count=each.count) for r in requests]  # type: ignore[attr-defined]
            out.constraints.append(pb.ClusterResourceConstraint(resource_requests=by_count))  # type: ignore[attr-defined]
        else:
            out.requests.extend(requests * each.count)
    return out
