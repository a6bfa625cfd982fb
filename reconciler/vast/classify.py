"""Turn what came back from vast (a response, or an httpx exception) into the error tree.

Classification reads vast's `error` field and message before the status, because the status alone
lies: a revoked key comes back as 404 `auth_error`, a taken offer as 400/404/410 `no_such_ask`, a
refusal as 200 `success: false`, and a 429 may be plain text, `{"detail": ...}` or vast's own
`{"error": "rate_limit_exceeded"}`. A 404 counts as "gone" only when its body is shaped like one of
vast's errors: a 404 page from something else (a wrong base URL, a proxy) must not make a destroy
report success or a show report an instance gone.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import math
import re
from collections.abc import Callable, Mapping

import httpx

from reconciler.vast import errors, redaction

_AUTH_TEXT = re.compile(r"invalid user key|session expired|please log in", re.IGNORECASE)
_RATE_TEXT = re.compile(r"too frequent|rate limit", re.IGNORECASE)
_GONE_CODES = frozenset({"no_such_instance", "not_found", "invalid_id"})
_CONNECT_FAILURES = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def decode_json(body: bytes) -> object | None:
    """The body as JSON, or `None` if it is not JSON at all."""
    try:
        return json.loads(body)  # type: ignore[no-any-return]
    except ValueError:  # includes UnicodeDecodeError
        return None


@dataclasses.dataclass(frozen=True)
class _Reply:
    """The parts of a response that decide its class."""

    status: int
    code: str | None  # vast's `error` field
    text: str  # vast's message, or the raw body when it is not JSON
    payload: Mapping[str, object] | None

    @property
    def orphan(self) -> int | None:
        """`new_contract` inside an error: an instance vast made despite refusing."""
        value = self.payload.get("new_contract") if self.payload is not None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None


# Ordered: the first rule that matches names the class. Auth comes first because vast dresses a bad
# key as 404; rate limits before "gone" because a 429 body can be anything; an orphan before the
# rest because whatever else went wrong, that instance bills until someone destroys it.
_RULES: tuple[tuple[Callable[[_Reply], bool], type[errors.VastError]], ...] = (
    (
        lambda r: (
            r.code == "auth_error" or r.status in (401, 403) or bool(_AUTH_TEXT.search(r.text))
        ),
        errors.VastAuthError,
    ),
    (lambda r: r.code == "search_quota_exceeded", errors.VastSearchQuotaError),
    (
        lambda r: (
            r.status == 429 or r.code == "rate_limit_exceeded" or bool(_RATE_TEXT.search(r.text))
        ),
        errors.VastRateLimitError,
    ),
    (lambda r: r.orphan is not None, errors.CreateLeftInstanceError),
    # A 5xx is a server error whatever its body claims: "gone" must come from a working server.
    (lambda r: r.status >= 500, errors.VastServerError),
    (lambda r: r.code == "no_such_ask" or "no_such_ask" in r.text, errors.VastOfferGoneError),
    (
        lambda r: r.code in _GONE_CODES or (r.status == 404 and _is_vast_error(r.payload)),
        errors.VastNotFoundError,
    ),
    (lambda r: r.status == 404, errors.VastProtocolError),  # a 404 that is not vast's
    (lambda r: True, errors.VastRejectedError),
)


def response_error(
    *,
    operation: str,
    where: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    redactor: redaction.Redactor,
    now: float,
) -> errors.VastError | None:
    """The error this response stands for, or `None` if it is a success."""
    decoded = decode_json(body)
    payload = decoded if isinstance(decoded, dict) else None
    refused = payload is not None and payload.get("success") is False
    if status < 400 and not refused:
        return None
    reply = _reply(status, payload, body)
    cls = next(cls for matches, cls in _RULES if matches(reply))
    code = f" {reply.code}" if reply.code else ""
    message = f"{where}: HTTP {status}{code}: {redactor.excerpt(body)}"
    op, code_ = operation, reply.code
    if cls is errors.VastSearchQuotaError:
        reset = _reset_in(headers, now)
        return cls(message, operation=op, status=status, code=code_, retry_after=reset)
    if cls is errors.VastRateLimitError:
        after = retry_after_seconds(headers, now)
        return cls(message, operation=op, status=status, code=code_, retry_after=after)
    if cls is errors.CreateLeftInstanceError:
        orphan = reply.orphan
        assert orphan is not None  # the rule matched on it
        return cls(message, operation=op, status=status, code=code_, instance_id=orphan)
    return cls(message, operation=op, status=status, code=code_)


def _reply(status: int, payload: Mapping[str, object] | None, body: bytes) -> _Reply:
    messages = (_text_field(payload, key) for key in ("msg", "message", "detail"))
    text = " ".join(m for m in messages if m)
    if payload is None:
        text = body.decode("utf-8", errors="replace")
    return _Reply(status=status, code=_text_field(payload, "error"), text=text, payload=payload)


def transport_error(
    *, operation: str, where: str, exc: httpx.HTTPError, redactor: redaction.Redactor
) -> errors.VastError:
    """The error an httpx exception stands for; the most specific class that is true."""
    message = f"{where}: {type(exc).__name__}: {redactor.scrub(str(exc)) or 'no detail'}"
    if isinstance(exc, _CONNECT_FAILURES):
        return errors.VastConnectError(message, operation=operation)
    if isinstance(exc, httpx.UnsupportedProtocol):
        return errors.VastConfigError(message, operation=operation)
    if isinstance(exc, httpx.TransportError):
        return errors.VastTransportError(message, operation=operation)
    return errors.VastProtocolError(message, operation=operation)


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """`Retry-After` as seconds from `now`: a number, or an HTTP date; `None` if absent or junk."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _reset_in(headers: Mapping[str, str], now: float) -> float | None:
    raw = headers.get("x-ratelimit-reset")
    try:
        reset = float(raw) if raw is not None else math.nan
    except ValueError:
        return None
    return max(0.0, reset - now) if math.isfinite(reset) else None


def _text_field(payload: Mapping[str, object] | None, key: str) -> str | None:
    value = payload.get(key) if payload is not None else None
    return value.strip() if isinstance(value, str) and value.strip() else None


def _is_vast_error(payload: Mapping[str, object] | None) -> bool:
    """vast's error bodies carry `error` or `msg` (and usually `success: false`)."""
    if payload is None:
        return False
    return payload.get("success") is False or "error" in payload or "msg" in payload
