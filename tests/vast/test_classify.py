"""Responses and transport failures land on the right branch of the error tree.

The matrix is the wire shapes of `reference/vast-api.md` section 8: classification must follow
vast's `error` field and message, not the status alone.
"""

from __future__ import annotations

import email.utils
import pickle

import httpx
import pytest

from reconciler.vast import classify, errors, redaction

NOW = 1_790_000_000.0
REDACTOR = redaction.Redactor(["the-key"], excerpt_chars=80)


def classify_reply(
    status: int, body: bytes | str, headers: dict[str, str] | None = None
) -> errors.VastError | None:
    raw = body.encode() if isinstance(body, str) else body
    return classify.response_error(
        operation="op",
        where="GET /x",
        status=status,
        headers=httpx.Headers(headers or {}),
        body=raw,
        redactor=REDACTOR,
        now=NOW,
    )


MATRIX = [
    pytest.param(200, '{"success": true}', None, id="ok"),
    pytest.param(200, '{"instances": []}', None, id="ok-without-success"),
    pytest.param(
        401,
        '{"success": false, "error": "auth_error", "msg": "Invalid user key"}',
        errors.VastAuthError,
        id="401-auth",
    ),
    pytest.param(
        404,
        '{"success": false, "error": "auth_error", "msg": "Invalid user key"}',
        errors.VastAuthError,
        id="404-auth-error-is-auth-not-gone",
    ),
    pytest.param(
        404, '{"msg": "Session expired. Please log in again."}', errors.VastAuthError, id="404-tfa"
    ),
    pytest.param(403, '{"error": "not_authorized"}', errors.VastAuthError, id="403"),
    pytest.param(429, "API requests too frequent", errors.VastRateLimitError, id="429-text"),
    pytest.param(
        429,
        '{"detail": "API requests too frequent endpoint threshold=4.5"}',
        errors.VastRateLimitError,
        id="429-detail",
    ),
    pytest.param(
        429,
        '{"success": false, "error": "rate_limit_exceeded", "msg": "slow down"}',
        errors.VastRateLimitError,
        id="429-json",
    ),
    pytest.param(
        429,
        '{"success": false, "error": "search_quota_exceeded", "msg": "daily quota"}',
        errors.VastSearchQuotaError,
        id="quota",
    ),
    pytest.param(
        404, '{"success": false, "error": "no_such_instance"}', errors.VastNotFoundError, id="gone"
    ),
    pytest.param(
        404,
        '{"success": false, "error": "not_found", "msg": "Instance not found"}',
        errors.VastNotFoundError,
        id="not-found",
    ),
    pytest.param(
        200,
        '{"success": false, "error": "no_such_instance", "msg": "x"}',
        errors.VastNotFoundError,
        id="200-success-false-gone",
    ),
    pytest.param(404, '{"detail": "Not Found"}', errors.VastProtocolError, id="404-framework"),
    pytest.param(404, "<html>nginx 404</html>", errors.VastProtocolError, id="404-html"),
    pytest.param(
        404,
        '{"error": "invalid_args", "msg": "error 404/3603: no_such_ask Instance type by id 5 '
        'is not available."}',
        errors.VastOfferGoneError,
        id="404-no-such-ask-in-msg",
    ),
    pytest.param(
        410,
        '{"error": "no_such_ask", "msg": "error 410/3907: no_such_ask no longer available."}',
        errors.VastOfferGoneError,
        id="410-no-such-ask",
    ),
    pytest.param(
        400, '{"success": false, "error": "no_such_ask"}', errors.VastOfferGoneError, id="400-ask"
    ),
    pytest.param(
        410,
        '{"success": false, "error": "deprecated_endpoint", "msg": "/api/v0/instances/ is '
        'deprecated."}',
        errors.VastRejectedError,
        id="410-deprecated",
    ),
    pytest.param(
        400,
        '{"success": false, "error": "invalid_args", "msg": "bad"}',
        errors.VastRejectedError,
        id="400",
    ),
    pytest.param(
        400,
        '{"success": false, "error": "invalid_price", "msg": "bid too low", "new_contract": 77}',
        errors.CreateLeftInstanceError,
        id="spot-orphan",
    ),
    pytest.param(
        500, "<html><body>Internal Server Error</body></html>", errors.VastServerError, id="500"
    ),
    pytest.param(503, "", errors.VastServerError, id="503-empty"),
    pytest.param(
        502,
        '{"success": false, "error": "no_such_instance"}',
        errors.VastServerError,
        id="5xx-claiming-gone-is-not-gone",
    ),
]


@pytest.mark.parametrize(("status", "body", "expected"), MATRIX)
def test_response_classification(
    status: int, body: str, expected: type[errors.VastError] | None
) -> None:
    error = classify_reply(status, body)
    if expected is None:
        assert error is None
    else:
        assert type(error) is expected
        assert error.status == status
        assert error.operation == "op"


def test_vast_error_code_is_kept() -> None:
    error = classify_reply(410, '{"error": "deprecated_endpoint", "msg": "x"}')
    assert error is not None
    assert error.code == "deprecated_endpoint"


def test_spot_orphan_names_the_instance_to_destroy() -> None:
    error = classify_reply(400, '{"error": "invalid_price", "new_contract": 4242}')
    assert isinstance(error, errors.CreateLeftInstanceError)
    assert error.instance_id == 4242


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Retry-After": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "1e400"}, None),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": email.utils.formatdate(NOW + 30, usegmt=True)}, 30.0),
    ],
)
def test_retry_after_is_read_as_seconds(headers: dict[str, str], expected: float | None) -> None:
    error = classify_reply(429, "API requests too frequent", headers)
    assert isinstance(error, errors.VastRateLimitError)
    assert error.retry_after == expected


def test_search_quota_waits_until_its_reset() -> None:
    error = classify_reply(
        429, '{"error": "search_quota_exceeded"}', {"X-RateLimit-Reset": str(int(NOW + 3600))}
    )
    assert isinstance(error, errors.VastSearchQuotaError)
    assert error.retry_after == 3600.0


def test_message_is_truncated_and_scrubbed() -> None:
    body = "<html>" + "x" * 500 + " the-key " + "y" * 500 + "</html>"
    error = classify_reply(500, body)
    assert error is not None
    assert "the-key" not in str(error)
    assert len(str(error)) < 200
    assert "more chars" in str(error)


def test_key_at_the_cut_is_scrubbed_before_truncating() -> None:
    body = "z" * 78 + "the-key" + "z" * 100
    error = classify_reply(500, body)
    assert error is not None
    assert "the-k" not in str(error)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx.ConnectError("refused"), errors.VastConnectError),
        (httpx.ConnectTimeout("slow"), errors.VastConnectError),
        (httpx.PoolTimeout("pool"), errors.VastConnectError),
        (httpx.ReadTimeout("read"), errors.VastTransportError),
        (httpx.WriteError("write"), errors.VastTransportError),
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            errors.VastTransportError,
        ),
        (httpx.DecodingError("gzip"), errors.VastProtocolError),
        (httpx.UnsupportedProtocol("ftp"), errors.VastConfigError),
    ],
)
def test_transport_failures_map_to_the_most_specific_class(
    exc: httpx.HTTPError, expected: type[errors.VastError]
) -> None:
    error = classify.transport_error(operation="op", where="GET /x", exc=exc, redactor=REDACTOR)
    assert type(error) is expected
    assert error.status is None


@pytest.mark.parametrize(
    "error",
    [
        errors.VastRateLimitError("m", operation="list", status=429, retry_after=3.0),
        errors.CreateLeftInstanceError("m", instance_id=5, status=400, code="invalid_price"),
        errors.CreateOutcomeUnknownError("m", label="rv.c.x.1", offer_id=9, status=503),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling_with_their_fields(error: errors.VastError) -> None:
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is type(error)
    assert str(restored) == "m"
    assert restored.__dict__ == error.__dict__
