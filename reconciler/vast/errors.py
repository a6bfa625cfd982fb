"""The one error tree at the vast API boundary.

Everything the vast client raises is a `VastError`; httpx's own exceptions never escape it.
Callers (the executor, the nets) branch on these types, and the retry policies are written
against them, so the class says what the caller may do next::

    VastError
    ├── VastConfigError           cannot start: no API key, a base URL that is not an origin
    ├── VastAuthError             the key is wrong, revoked or lacks permission (401/403,
    │                             or any status whose body says `auth_error`/"Invalid user key")
    ├── VastNotFoundError         the instance is gone (`no_such_instance`, `not_found`, 404)
    ├── VastOfferGoneError        the offer was taken or withdrawn (`no_such_ask`, 400/404/410)
    ├── VastRateLimitError        429 or `rate_limit_exceeded`; `retry_after` s if vast said
    │   └── VastSearchQuotaError  the daily search quota; `retry_after` runs to its reset
    ├── VastServerError           5xx; `status` says which
    ├── VastTransportError        no usable HTTP response: timeouts, resets, dropped connections
    │   └── VastConnectError      the request never reached vast (refused, DNS, connect timeout)
    ├── VastProtocolError         a body vast does not send: not JSON, missing keys, bad types
    ├── VastRejectedError         vast understood and refused (invalid_args, deprecated_endpoint,
    │   │                         insufficient_balance, ...); `code` is vast's `error` field
    │   └── CreateLeftInstanceError   a refused create that still made an instance (a spot bid
    │                             too low leaves a stopped one); destroy `instance_id`
    └── CreateOutcomeUnknownError a create may or may not have happened (lost response, 5xx,
                                  unreadable answer): look for `label` in the listing

Why classify by vast's `error` field and message before the status: the real server answers a bad
key with 404 + `auth_error`, a taken offer with 400, 404 or 410, and some refusals with 200 and
`success: false`. A status table alone would call a revoked key "instance gone" and let a destroy
report success for an instance that still bills.

Messages are built by the client from the operation, the status and a truncated, scrubbed excerpt
of the body; the API key never appears in them (see `redaction`).
"""

from __future__ import annotations

from reconciler.errors import RayVastError


class VastError(RayVastError):
    """Anything that went wrong talking to vast.

    `operation` is the client operation (`"list"`, `"create"`, ...), `status` the HTTP status if a
    response arrived, `code` vast's `error` field if the body had one.
    """

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.operation = operation
        self.status = status
        self.code = code

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take keyword-only fields, which Exception's own pickling cannot pass back.
        return (_restore, (type(self), self.message, dict(self.__dict__)))


def _restore(cls: type[VastError], message: str, state: dict[str, object]) -> VastError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class VastConfigError(VastError):
    """The client cannot be built or used as configured (missing key, malformed base URL)."""


class VastAuthError(VastError):
    """The API key was refused. Retrying will not help; a person must fix the key."""


class VastNotFoundError(VastError):
    """The instance does not exist (any more). For destroy this is success."""


class VastOfferGoneError(VastError):
    """The offer can no longer be rented; search again and try the next one."""


class VastRateLimitError(VastError):
    """vast asked us to slow down. `retry_after` is in seconds, `None` if vast did not say."""

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        status: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, operation=operation, status=status, code=code)
        self.retry_after = retry_after


class VastSearchQuotaError(VastRateLimitError):
    """The daily search quota is spent; never retried, `retry_after` runs to the reset time."""


class VastServerError(VastError):
    """vast answered 5xx. Safe to retry for reads and idempotent writes, never for create."""


class VastTransportError(VastError):
    """No usable HTTP response arrived. The request may or may not have reached vast."""


class VastConnectError(VastTransportError):
    """The request never left this machine or never reached vast; nothing happened there."""


class VastProtocolError(VastError):
    """The body is not what vast sends. Treated as an error, never as an empty answer."""


class VastRejectedError(VastError):
    """vast understood the request and refused it for a reason named in `code`."""


class CreateLeftInstanceError(VastRejectedError):
    """A refused create that nevertheless left an instance (`new_contract` in the error body).

    vast creates a spot instance in the stopped state and then reports the bid as insufficient;
    that instance bills storage until destroyed, so the caller must destroy `instance_id`.
    """

    def __init__(
        self,
        message: str,
        *,
        instance_id: int,
        operation: str | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message, operation=operation, status=status, code=code)
        self.instance_id = instance_id


class CreateOutcomeUnknownError(VastError):
    """A create may have made an instance: do not create again until the listing says.

    Raised instead of retrying when the request may have reached vast but no readable answer came
    back. The caller keeps its pending-create record and looks for `label` in the next listings;
    the underlying failure is the exception's `__cause__`.
    """

    def __init__(
        self, message: str, *, label: str, offer_id: int, status: int | None = None
    ) -> None:
        super().__init__(message, operation="create", status=status)
        self.label = label
        self.offer_id = offer_id
