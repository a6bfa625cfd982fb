"""Client-side pacing keeps calls one interval apart per route, across threads; counters count."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import pytest

from reconciler.clock import FakeClock
from reconciler.model import observed
from reconciler.vast import VastClient, endpoints, errors, pacing

from .vast_helpers import ScriptedVast, fail, instance_row, page, reply

START = 1_790_000_000.0


class FrozenClock:
    """Time that never moves, recording what it was asked to sleep: the reservations show."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        return START

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)


def test_same_route_waits_one_interval_other_routes_do_not() -> None:
    clock = FakeClock(START)
    pacer = pacing.Pacer(clock, {"a": 2.0, "b": 5.0})
    assert pacer.wait_turn("a") == 0.0
    assert pacer.wait_turn("b") == 0.0
    assert pacer.wait_turn("a") == 2.0
    assert clock.now() == START + 2.0
    clock.advance(10)
    assert pacer.wait_turn("a") == 0.0


def test_disabled_pacing_never_waits() -> None:
    clock = FakeClock(START)
    pacer = pacing.Pacer(clock, {"a": 2.0}, enabled=False)
    for _ in range(3):
        pacer.wait_turn("a")
    assert clock.now() == START


def test_concurrent_callers_get_distinct_slots_one_interval_apart() -> None:
    clock = FrozenClock()
    pacer = pacing.Pacer(clock, {"a": 1.0})
    barrier = threading.Barrier(10)

    def take_turn() -> None:
        barrier.wait()
        pacer.wait_turn("a")

    threads = [threading.Thread(target=take_turn) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(clock.slept) == [float(n) for n in range(1, 10)]  # the first did not sleep


def test_hold_off_delays_every_caller_of_the_route() -> None:
    clock = FakeClock(START)
    pacer = pacing.Pacer(clock, {"a": 1.0})
    pacer.hold_off("a", 30.0)
    assert pacer.wait_turn("a") == 30.0


def test_client_paces_by_the_documented_thresholds(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(pacing=True)
    vast.on("GET", "/api/v0/instances/5/", *[reply(200, {"instances": instance_row(5)})] * 3)
    times: list[float] = []
    for _ in range(3):
        client.show_instance(5)
        times.append(clock.now())
    interval = endpoints.DEFAULT_MIN_INTERVALS["instances.show"]
    assert times == pytest.approx([START, START + interval, START + 2 * interval])
    # a little wider than vast's threshold: calls arrive no sooner than it, whatever the jitter
    assert interval > endpoints.VAST_THRESHOLDS["instances.show"]


def test_stop_start_and_label_share_one_budget(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(pacing=True, min_intervals={"instances.update": 4.0})
    vast.on("PUT", "/api/v0/instances/5/", *[reply(200, {"success": True})] * 3)
    client.stop_instance(5)
    client.start_instance(5)
    client.label_instance(5, "x")
    assert clock.now() == START + 8.0


def test_a_429_with_retry_after_holds_the_route_for_the_next_call_too(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(pacing=True, min_intervals={})
    vast.on(
        "GET",
        "/api/v1/instances/",
        reply(429, text="API requests too frequent", headers={"Retry-After": "5"}),
        reply(200, page([], None)),
    )
    client.list_instances()
    assert clock.now() == START + 5.0


def test_a_quota_reset_hours_away_holds_the_route_only_up_to_the_cap(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(pacing=True, min_intervals={})
    reset = {"X-RateLimit-Reset": str(int(START + 6 * 3600))}
    body = {"success": False, "error": "search_quota_exceeded", "msg": "daily quota"}
    vast.on("POST", "/api/v0/bundles/", reply(429, body, headers=reset))
    vast.on("POST", "/api/v0/bundles/", reply(200, {"offers": []}))
    with pytest.raises(errors.VastSearchQuotaError) as info:
        client.search_offers(observed.OfferSearch())
    assert info.value.retry_after == 6 * 3600
    assert clock.now() == START  # not waited out here
    client.search_offers(observed.OfferSearch())
    assert clock.now() == START + 60.0


def test_counters_count_every_attempt_by_operation_and_outcome(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on(
        "GET",
        "/api/v1/instances/",
        reply(429, text="API requests too frequent"),
        fail(httpx.ReadTimeout),
        reply(503, text=""),
        reply(200, page([instance_row(1)], None)),
    )
    vast.on("DELETE", "/api/v0/instances/1/", reply(404, {"error": "no_such_instance"}))
    vast.on("PUT", "/api/v0/asks/9/", fail(httpx.ReadTimeout))
    client.list_instances()
    client.destroy_instance(1)
    with pytest.raises(errors.CreateOutcomeUnknownError):
        client.create_instance(9, observed.CreateRequest(image="i", disk_gb=1, label="l"))
    assert client.counters == {
        ("list", "rate_limited"): 1,
        ("list", "transport_error"): 1,
        ("list", "server_error"): 1,
        ("list", "ok"): 1,
        ("destroy", "not_found"): 1,
        ("create", "transport_error"): 1,
    }


def test_counters_are_a_snapshot(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("GET", "/api/v1/instances/", reply(200, page([], None)))
    before = client.counters
    client.list_instances()
    assert before == {}
    assert client.counters == {("list", "ok"): 1}
