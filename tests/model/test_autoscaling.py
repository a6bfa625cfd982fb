"""What ray-vast tells Ray as its autoscaler, read from its records (issue 24)."""

from __future__ import annotations

import pytest

from reconciler.model.autoscaling import FAILED_WINDOW_SECONDS, autoscaler_state
from reconciler.model.demand import Unmet
from reconciler.model.records import Phase, Role
from tests.planning.builders import NOW, record, records, request


def test_open_slots_nobody_rents_for_are_pending_requests_and_rented_machines_pending_nodes() -> (
    None
):
    renting = record("i1", vast_id=11, phase=Phase.PULLING)
    state = autoscaler_state("c1", records(renting, request(slots=3)), (), NOW)
    assert [(r.node_type, r.count) for r in state.requests] == [("gpu", 2)]
    assert [(p.node_type, p.instance_id, p.details) for p in state.pending] == [
        ("gpu", "11", "pulling the image")
    ]
    assert state.pending[0].instance_type == "vast offer 1 ($0.500/h)"


def test_a_worker_whose_ray_joined_is_no_longer_pending() -> None:
    joined = record("i1", vast_id=11, role=Role.WORKER, phase=Phase.SERVING, serving_at=NOW - 5)
    filled = request(slots=1, workers=("i1",))
    assert autoscaler_state("c1", records(joined, filled), (), NOW).pending == ()
    assert autoscaler_state("c1", records(joined, filled), (), NOW).requests == ()


@pytest.mark.parametrize(
    ("ended", "shown"), [(NOW - 60, True), (NOW - FAILED_WINDOW_SECONDS - 1, False)]
)
def test_a_rental_that_ended_without_a_worker_is_a_recent_failure(
    ended: float, shown: bool
) -> None:
    gone = record(
        "i1", vast_id=11, phase=Phase.DESTROYED, ended_at=ended, ended_reason="enroll_timeout"
    )
    failed = autoscaler_state("c1", records(gone), (), NOW).failed
    assert [(f.node_type, f.reason) for f in failed] == (
        [("gpu", "enroll_timeout")] if shown else []
    )


def test_another_clusters_records_are_not_told() -> None:
    theirs = record("i1", cluster="c2", vast_id=11, phase=Phase.PULLING)
    state = autoscaler_state("c1", records(theirs), (), NOW)
    assert state.pending == () and state.requests == ()


def test_the_protobuf_is_what_rays_status_reads() -> None:
    """Encoded as Ray's autoscaler v2 encodes it; read back with Ray's own parser of it."""
    pb = pytest.importorskip("ray.core.generated.autoscaler_pb2")
    from reconciler.watch.rayreport import encoded  # noqa: PLC0415

    renting = record("i1", vast_id=11, phase=Phase.ENROLLED, public_ip="203.0.113.9")
    tpu = Unmet("tasks", ({"TPU": 1.0},), 2)
    state = autoscaler_state("c1", records(renting, request(slots=2)), (tpu,), NOW)
    told = pb.AutoscalingState.FromString(encoded(state, now=NOW, seen_version=7))
    assert told.last_seen_cluster_resource_state_version == 7
    assert told.autoscaler_state_version == int(NOW * 1000)
    assert [(p.ray_node_type_name, p.count) for p in told.pending_instance_requests] == [("gpu", 1)]
    assert [(p.instance_id, p.ip_address) for p in told.pending_instances] == [
        ("11", "203.0.113.9")
    ]
    assert "starting Ray" in told.pending_instances[0].details
    assert [dict(r.resources_bundle) for r in told.infeasible_resource_requests] == [
        {"TPU": 1.0},
        {"TPU": 1.0},
    ]


def test_a_worker_whose_node_ray_already_shows_is_not_pending() -> None:
    """Tried from a clean clone: `ray status` listed the worker as Idle and, from ray-vast, as
    pending ("enrolled, starting ray") until the head marked it serving."""
    enrolled = record("i1", vast_id=11, role=Role.WORKER, phase=Phase.ENROLLED)
    filled = request(slots=1, workers=("i1",))
    assert autoscaler_state("c1", records(enrolled, filled), (), NOW).pending != ()
    shown = autoscaler_state("c1", records(enrolled, filled), (), NOW, in_ray={"i1"})
    assert shown.pending == ()


@pytest.mark.parametrize(("reason", "failed"), [("extra_candidate", False), ("down", False),
                                                ("create_failed", True), ("pull_timeout", True),
                                                ("something_new", True)])  # fmt: skip
def test_only_an_ending_by_a_fault_is_a_recent_failure(reason: str, failed: bool) -> None:
    """Tried from a clean clone: the extra candidate ended because the other one won its slot
    showed in `ray status` as "cpu: LaunchFailed"."""
    gone = record("i1", vast_id=11, phase=Phase.DESTROYED, ended_at=NOW - 5, ended_reason=reason)
    assert bool(autoscaler_state("c1", records(gone), (), NOW).failed) is failed
