"""The request and pool watchdogs: they release, fail or reset requests, never touch a machine."""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.records import Phase, PoolState, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.nets import pools
from tests.planning.builders import NOW, record, records, request, spec

SPEC = spec(min_workers=0)
SPECS = {SPEC.name: SPEC}
W = SPEC.watchdogs
KEY = ("c1", "gpu")


def test_pool_idle_release_starts_a_clock_then_releases_open_requests() -> None:
    state = records(request())
    first = pools.pool_idle_release(state, SPECS, demand={}, busy={}, now=NOW)
    assert first.pools == {"c1/gpu": PoolState(NOW)} and first.requests == {}
    later = replace(state, pools=first.pools)
    done = pools.pool_idle_release(
        later, SPECS, demand={}, busy={}, now=NOW + W.pool_idle_release_seconds
    )
    assert done.requests["q1"].status is RequestStatus.RELEASED
    assert [d.cls for d in done.detections] == ["pool_idle_release"]
    assert not any(hasattr(d, "vast_id") and d.vast_id for d in done.detections)


def test_pool_idle_release_waits_while_there_is_demand_or_work() -> None:
    state = replace(
        records(request(), record("w1", vast_id=1, role=Role.WORKER)),
        pools={"c1/gpu": PoolState(NOW - 99_999)},
    )
    with_demand = pools.pool_idle_release(state, SPECS, demand={KEY: 1}, busy={}, now=NOW)
    assert with_demand.requests == {} and with_demand.pools == {"c1/gpu": PoolState(None)}
    working = pools.pool_idle_release(state, SPECS, demand={}, busy={"w1": True}, now=NOW)
    assert working.requests == {}


def test_queue_wait_fails_a_request_never_dispatched() -> None:
    old = request(placed_at=NOW - W.queue_wait_timeout_seconds - 1)
    result = pools.queue_wait(records(old), SPECS, now=NOW)
    assert result.requests["q1"].status is RequestStatus.FAILED
    dispatched = replace(old, dispatched_at=NOW - 10)
    assert pools.queue_wait(records(dispatched), SPECS, now=NOW).requests == {}


def test_no_consumer_fails_a_request_nobody_waits_for() -> None:
    result = pools.no_consumer(records(request()), SPECS, demand={})
    assert result.requests["q1"].status is RequestStatus.FAILED
    assert pools.no_consumer(records(request()), SPECS, demand={KEY: 1}).requests == {}
    needed = spec(min_workers=1)
    assert pools.no_consumer(records(request()), {needed.name: needed}, demand={}).requests == {}


def test_stuck_dispatch_puts_a_request_without_candidates_back_in_the_queue() -> None:
    stuck = request(dispatched_at=NOW - 120)
    result = pools.stuck_dispatch(records(stuck), SPECS, now=NOW, cadence=60)
    assert result.requests["q1"].dispatched_at is None
    alive = record("i1", vast_id=1, phase=Phase.PULLING)
    assert pools.stuck_dispatch(records(stuck, alive), SPECS, now=NOW, cadence=60).requests == {}


def test_no_pool_net_ever_names_a_machine() -> None:
    state = records(request(placed_at=NOW - 99_999, dispatched_at=None), record("i1", vast_id=1))
    results = [
        pools.queue_wait(state, SPECS, now=NOW),
        pools.no_consumer(state, SPECS, demand={}),
        pools.stuck_dispatch(state, SPECS, now=NOW, cadence=60),
    ]
    for result in results:
        assert all(d.record == "q1" and d.vast_id is None for d in result.detections)


# --- what the first build got wrong (issue 12, finding 3 and 7) -----------------------------


def test_pool_idle_release_never_releases_what_min_workers_needs() -> None:
    """Finding 3: a cold pull longer than the pool idle window never came up, because the
    release cancelled the very request min_workers had placed."""
    needed = spec(min_workers=1)
    state = replace(records(request()), pools={"c1/gpu": PoolState(NOW - 99_999)})
    kept = pools.pool_idle_release(state, {needed.name: needed}, demand={}, busy={}, now=NOW)
    assert kept.requests == {}
    two = spec(min_workers=1)
    above = replace(
        records(request("q1", placed_at=NOW - 100), request("q2", placed_at=NOW - 10)),
        pools={"c1/gpu": PoolState(NOW - 99_999)},
    )
    released = pools.pool_idle_release(above, {two.name: two}, demand={}, busy={}, now=NOW)
    assert set(released.requests) == {"q2"}  # the newest, above min_workers


def test_pool_idle_release_reads_unknown_demand_as_active() -> None:
    state = replace(records(request()), pools={"c1/gpu": PoolState(NOW - 99_999)})
    unknown = pools.pool_idle_release(state, SPECS, demand=None, busy={}, now=NOW)
    assert unknown.requests == {} and unknown.pools == {"c1/gpu": PoolState(None)}


def test_no_consumer_with_ray_unreadable_fails_nothing() -> None:
    """Finding 7: a failed Ray read counted as "no demand" and cancelled requests in flight."""
    assert pools.no_consumer(records(request()), SPECS, demand=None).requests == {}


def test_a_lost_worker_does_not_meet_min_workers() -> None:
    needed = spec(min_workers=1)
    lost = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, lost=True)
    result = pools.no_consumer(records(request(), lost), {needed.name: needed}, demand={})
    assert result.requests == {}


def test_stuck_dispatch_says_why_and_restarts_the_queue_wait() -> None:
    """Finding 7: the reset changed nothing a later step read. Now the request waits in the
    queue again from the reset, and the queue-wait timeout fails it if nothing rents."""
    stuck = request(
        placed_at=NOW - 99_999,
        dispatched_at=NOW - 120,
        dispatch_error="1 candidate(s) found no acceptable offer (offer 3: host is blocked)",
    )
    reset = pools.stuck_dispatch(records(stuck), SPECS, now=NOW, cadence=60)
    back = reset.requests["q1"]
    assert back.dispatched_at is None and back.queued_at == NOW
    assert "host is blocked" in reset.detections[0].detail
    assert "searching afresh" in reset.detections[0].detail
    # the old placement time no longer fails it at once ...
    assert pools.queue_wait(records(back), SPECS, now=NOW + 60).requests == {}
    # ... the queue wait from the reset does
    late = NOW + W.queue_wait_timeout_seconds
    failed = pools.queue_wait(records(back), SPECS, now=late)
    assert failed.requests["q1"].status is RequestStatus.FAILED
    assert "host is blocked" in failed.detections[0].detail
