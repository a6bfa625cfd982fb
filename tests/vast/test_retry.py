"""Retries that are safe: idempotent calls ride out transient failures, create never repeats itself.

All waits go through the fake clock, so the tests read waited time from `clock.now()` and never
really sleep.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import httpx
import pytest

from reconciler.clock import FakeClock
from reconciler.model import observed
from reconciler.vast import RetrySettings, VastClient, errors

from .vast_helpers import ScriptedVast, fail, instance_row, page, reply

LIST = "/api/v1/instances/"
ASK = "/api/v0/asks/42/"
START = 1_790_000_000.0

OK_PAGE = reply(200, page([instance_row(1)], None))
RATE_LIMIT_SHAPES = {
    "text": reply(429, text="API requests too frequent"),
    "detail": reply(429, {"detail": "API requests too frequent endpoint threshold=1.0"}),
    "json": reply(429, {"success": False, "error": "rate_limit_exceeded", "msg": "slow down"}),
}


def create_request() -> observed.CreateRequest:
    return observed.CreateRequest(image="img", disk_gb=20, label="rv.c.abcdef12.r1")


@pytest.mark.parametrize(
    "transient",
    [
        *RATE_LIMIT_SHAPES.values(),
        reply(502, text="<html>Bad Gateway</html>"),
        reply(503, text="<html>Service Unavailable</html>"),
        reply(504, text=""),
        fail(httpx.ConnectError),
        fail(httpx.ReadTimeout),
        fail(httpx.RemoteProtocolError),
    ],
    ids=["429-text", "429-detail", "429-json", "502", "503", "504", "connect", "read", "dropped"],
)
def test_reads_retry_transient_failures(
    vast: ScriptedVast, client: VastClient, transient: Callable[[httpx.Request], httpx.Response]
) -> None:
    vast.on("GET", LIST, transient, transient, OK_PAGE)
    assert [i.id for i in client.list_instances()] == [1]
    assert len(vast.calls("GET", LIST)) == 3


def test_a_500_is_not_retried(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("GET", LIST, reply(500, text="<html>Internal Server Error</html>"))
    with pytest.raises(errors.VastServerError):
        client.list_instances()
    assert len(vast.requests) == 1


@pytest.mark.parametrize("shape", RATE_LIMIT_SHAPES)
def test_retry_after_is_honoured_exactly(
    vast: ScriptedVast, client: VastClient, clock: FakeClock, shape: str
) -> None:
    limited = RATE_LIMIT_SHAPES[shape]

    def with_header(request: httpx.Request) -> httpx.Response:
        response = limited(request)
        response.headers["Retry-After"] = "7"
        return response

    vast.on("GET", LIST, with_header, OK_PAGE)
    client.list_instances()
    assert clock.now() - START == pytest.approx(7.0)


def test_a_retry_after_beyond_the_cap_is_returned_not_waited(
    vast: ScriptedVast, client: VastClient, clock: FakeClock
) -> None:
    vast.on(
        "GET", LIST, reply(429, text="API requests too frequent", headers={"Retry-After": "61"})
    )
    with pytest.raises(errors.VastRateLimitError) as info:
        client.list_instances()
    assert info.value.retry_after == 61.0
    assert clock.now() == START
    assert len(vast.requests) == 1


def test_the_search_quota_is_not_retried(vast: ScriptedVast, client: VastClient) -> None:
    vast.on(
        "POST",
        "/api/v0/bundles/",
        reply(429, {"success": False, "error": "search_quota_exceeded", "msg": "daily quota"}),
    )
    with pytest.raises(errors.VastSearchQuotaError):
        client.search_offers(observed.OfferSearch())
    assert len(vast.requests) == 1


def test_backoff_grows_without_retry_after(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(retry=RetrySettings(backoff_base=1.0, backoff_max=100.0, deadline=1000))
    times: list[float] = []

    def limited(request: httpx.Request) -> httpx.Response:
        times.append(clock.now())
        return httpx.Response(503, text="")

    vast.on("GET", LIST, *[limited] * 5, OK_PAGE)
    client.list_instances()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # jitter keeps each wait within [50%, 100%] of 1, 2, 4, 8 s
    for gap, ceiling in zip(gaps, [1.0, 2.0, 4.0, 8.0], strict=True):
        assert ceiling / 2 <= gap <= ceiling


def test_retries_stop_at_the_deadline_on_the_injected_clock(
    vast: ScriptedVast, make_client: Callable[..., VastClient], clock: FakeClock
) -> None:
    client = make_client(retry=RetrySettings(deadline=30.0, max_attempts=100))
    vast.on("GET", LIST, *[reply(503, text="")] * 100)
    with pytest.raises(errors.VastServerError):
        client.list_instances()
    assert clock.now() - START <= 30.0
    assert 3 < len(vast.requests) < 100
    assert vast.unused()  # it gave up; it did not exhaust the script


def test_retries_stop_after_max_attempts(
    vast: ScriptedVast, make_client: Callable[..., VastClient]
) -> None:
    client = make_client(retry=RetrySettings(max_attempts=3))
    vast.on("GET", LIST, *[fail(httpx.ReadTimeout)] * 3)
    with pytest.raises(errors.VastTransportError):
        client.list_instances()
    assert len(vast.requests) == 3


@pytest.mark.parametrize(
    ("call", "method", "path"),
    [
        (lambda c: c.destroy_instance(5), "DELETE", "/api/v0/instances/5/"),
        (lambda c: c.stop_instance(5), "PUT", "/api/v0/instances/5/"),
        (lambda c: c.start_instance(5), "PUT", "/api/v0/instances/5/"),
        (lambda c: c.label_instance(5, "x"), "PUT", "/api/v0/instances/5/"),
        (lambda c: c.destroy_instances([5]), "DELETE", "/api/v0/instances/"),
    ],
    ids=["destroy", "stop", "start", "label", "bulk-destroy"],
)
def test_idempotent_writes_retry_like_reads(
    vast: ScriptedVast,
    client: VastClient,
    call: Callable[[VastClient], object],
    method: str,
    path: str,
) -> None:
    vast.on(
        method, path, reply(503, text=""), fail(httpx.ReadTimeout), reply(200, {"success": True})
    )
    call(client)
    assert len(vast.requests) == 3


# --- create ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", RATE_LIMIT_SHAPES)
def test_create_retries_a_429_because_vast_refused_it(
    vast: ScriptedVast, client: VastClient, shape: str
) -> None:
    vast.on("PUT", ASK, RATE_LIMIT_SHAPES[shape], reply(200, {"success": True, "new_contract": 7}))
    assert client.create_instance(42, create_request()).instance_id == 7
    assert len(vast.requests) == 2


def test_create_retries_a_connection_that_never_reached_vast(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on("PUT", ASK, fail(httpx.ConnectError), reply(200, {"success": True, "new_contract": 7}))
    assert client.create_instance(42, create_request()).instance_id == 7


@pytest.mark.parametrize(
    "ambiguous",
    [
        fail(httpx.ReadTimeout),
        fail(httpx.RemoteProtocolError, "Server disconnected without sending a response."),
        fail(httpx.WriteError),
        reply(500, text="<html>Internal Server Error</html>"),
        reply(502, text="<html>Bad Gateway</html>"),
        reply(503, text=""),
        reply(504, text=""),
        reply(200, text="<html>ok?</html>"),
        reply(200, {"success": True}),
    ],
    ids=["read-timeout", "dropped", "write", "500", "502", "503", "504", "200-html", "200-no-id"],
)
def test_create_with_an_ambiguous_failure_is_never_retried(
    vast: ScriptedVast,
    client: VastClient,
    ambiguous: Callable[[httpx.Request], httpx.Response],
) -> None:
    vast.on("PUT", ASK, ambiguous)  # a second PUT would be unscripted and fail the test
    with pytest.raises(errors.CreateOutcomeUnknownError) as info:
        client.create_instance(42, create_request())
    assert info.value.label == "rv.c.abcdef12.r1"
    assert info.value.offer_id == 42
    assert isinstance(info.value.__cause__, errors.VastError)
    assert len(vast.requests) == 1


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            reply(
                404,
                {
                    "error": "invalid_args",
                    "msg": "no_such_ask Instance type by id 42 is not available.",
                },
            ),
            errors.VastOfferGoneError,
        ),
        (
            reply(410, {"error": "no_such_ask", "msg": "error 410/3907: no longer available"}),
            errors.VastOfferGoneError,
        ),
        (reply(400, {"success": False, "error": "no_such_ask"}), errors.VastOfferGoneError),
        (reply(404, {"success": False, "error": "not_found"}), errors.VastOfferGoneError),
        (reply(400, {"error": "invalid_args", "msg": "Invalid args"}), errors.VastRejectedError),
        (reply(404, {"error": "auth_error", "msg": "Invalid user key"}), errors.VastAuthError),
        (
            reply(400, {"error": "invalid_price", "new_contract": 31}),
            errors.CreateLeftInstanceError,
        ),
    ],
    ids=["404-ask", "410-ask", "400-ask", "404-gone", "invalid-args", "auth", "spot-orphan"],
)
def test_create_definite_refusals_are_raised_as_such(
    vast: ScriptedVast,
    client: VastClient,
    answer: Callable[[httpx.Request], httpx.Response],
    expected: type[errors.VastError],
) -> None:
    vast.on("PUT", ASK, answer)
    with pytest.raises(expected):
        client.create_instance(42, create_request())
    assert len(vast.requests) == 1


def test_create_rate_limited_to_the_end_is_a_refusal_not_unknown(
    vast: ScriptedVast, make_client: Callable[..., VastClient]
) -> None:
    client = make_client(retry=RetrySettings(max_attempts=2))
    vast.on("PUT", ASK, *[RATE_LIMIT_SHAPES["text"]] * 2)
    with pytest.raises(errors.VastRateLimitError):
        client.create_instance(42, create_request())


def test_reboot_is_not_repeated_after_an_ambiguous_failure(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on("PUT", "/api/v0/instances/reboot/5/", reply(503, text=""))
    with pytest.raises(errors.VastServerError):
        client.reboot_instance(5)
    assert len(vast.requests) == 1
