"""The vast API client: the only code in ray-vast that talks HTTP.

`VastClient` is built on an injected `httpx.Client`, so tests and virtual-time benchmarks hand it an
in-process transport to the simulator, and production hands it a real one (see `factory`). Each
operation is one method; each method goes through the same path:

    pace (per-route minimum interval, shared by all threads)
    -> send (Bearer key in the header, never in the URL)
    -> classify (vast's error field and message first, then the status; see `classify`)
    -> parse (into `reconciler.model.observed`; a body vast would not send is an error)
    -> count (operation, outcome)

wrapped in the retry policy the operation can afford (see `retry`). What no method ever does is
turn an error into an answer: a failed page fails the listing, a lost create response is
`CreateOutcomeUnknownError`, a 404 that is not vast's is not "gone".
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Self, TypeVar

import httpx

from reconciler import clock as clock_mod
from reconciler.model import observed
from reconciler.vast import (
    classify,
    config,
    counters,
    endpoints,
    errors,
    pacing,
    parse,
    redaction,
    wire,
)
from reconciler.vast import retry as retry_mod

_log = logging.getLogger(__name__)
T = TypeVar("T")

# Create errors that prove vast did not make an instance; anything else is an unknown outcome.
_CREATE_DEFINITE = (
    errors.VastConnectError,
    errors.VastRateLimitError,
    errors.VastAuthError,
    errors.VastOfferGoneError,
    errors.VastRejectedError,
    errors.VastConfigError,
)


class VastClient:
    """Typed operations on the vast API. Thread-safe; share one per process."""

    def __init__(
        self,
        *,
        http: httpx.Client,
        base_url: str,
        api_key: str,
        clock: clock_mod.Clock,
        settings: config.ClientSettings | None = None,
        rng: random.Random | None = None,
        owns_http: bool = False,
    ) -> None:
        if not api_key:
            raise errors.VastConfigError("an API key is required")
        self._settings = settings or config.ClientSettings()
        self._http = http
        self._owns_http = owns_http
        self._base_url = _origin(base_url)
        self._key = redaction.Secret(api_key)
        self._redactor = redaction.Redactor([api_key], excerpt_chars=self._settings.excerpt_chars)
        self._clock = clock
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._pacer = pacing.Pacer(
            clock, self._settings.min_intervals, enabled=self._settings.pacing
        )
        self._counters = counters.RequestCounters()

    def __repr__(self) -> str:
        return f"VastClient(base_url={self._base_url!r}, api_key={self._key!r})"

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def counters(self) -> Mapping[tuple[str, str], int]:
        """Requests sent so far by (operation, outcome); a snapshot."""
        return self._counters.snapshot()

    # --- offers and creating -------------------------------------------------------------------

    def search_offers(self, query: observed.OfferSearch) -> list[observed.Offer]:
        """Offers matching `query`, cheapest (`dph_total`) first, at most `query.limit`.

        Sorted here as well: the order is a safety property (the cheapest acceptable offer is
        rented first), so it does not rest on the server honouring `order`.
        """
        offers = self._call(endpoints.SEARCH, parse.offers, json=wire.search_body(query))
        return sorted(offers, key=lambda o: o.dph_total)[: query.limit]

    def create_instance(
        self, offer_id: int, request: observed.CreateRequest
    ) -> observed.CreatedInstance:
        """Rent `offer_id`. Never retried into a second instance.

        Raises `CreateOutcomeUnknownError` when vast may have created it without us hearing (look
        for `request.label` in the listing), `CreateLeftInstanceError` when vast refused but left
        an instance behind (destroy it), `VastOfferGoneError` when the offer is taken.
        """
        try:
            return self._call(
                endpoints.CREATE,
                parse.created,
                policy=retry_mod.Policy.REFUSED_ONLY,
                instance_id=offer_id,
                json=wire.create_body(request),
            )
        except errors.VastNotFoundError as exc:
            raise errors.VastOfferGoneError(
                str(exc), operation="create", status=exc.status, code=exc.code
            ) from exc
        except _CREATE_DEFINITE:
            raise
        except errors.VastError as exc:
            _log.warning("vast create of offer %d has an unknown outcome: %s", offer_id, exc)
            raise errors.CreateOutcomeUnknownError(
                f"create of offer {offer_id} (label {request.label!r}) may have succeeded: {exc}",
                label=request.label,
                offer_id=offer_id,
                status=exc.status,
            ) from exc

    # --- reading instances ---------------------------------------------------------------------

    def list_instances(self) -> list[observed.Instance]:
        """Every instance of the account, following `next_token` to the end.

        All or nothing: a page that still fails after its retries fails the listing.
        """
        by_id: dict[int, observed.Instance] = {}
        seen_tokens: set[str] = set()
        token: str | None = None
        for _ in range(self._settings.max_pages):
            params = wire.list_params(after_token=token, page_size=self._settings.page_size)
            page = self._call(endpoints.LIST, parse.instance_page, params=params)
            by_id.update((inst.id, inst) for inst in page.instances)
            if page.next_token is None:
                return list(by_id.values())
            if page.next_token in seen_tokens:
                raise errors.VastProtocolError("listing: next_token repeats", operation="list")
            seen_tokens.add(page.next_token)
            token = page.next_token
        raise errors.VastProtocolError(
            f"listing: still paging after {self._settings.max_pages} pages", operation="list"
        )

    def show_instance(self, instance_id: int) -> observed.Instance | None:
        """One instance, or `None` when vast says it is gone."""

        def shown(payload: object) -> observed.Instance | None:
            found = parse.shown_instance(payload)
            if found is not None and found.id != instance_id:
                raise parse.ParseError(f"asked for instance {instance_id}, got {found.id}")
            return found

        try:
            return self._call(
                endpoints.SHOW, shown, instance_id=instance_id, params=wire.SHOW_PARAMS
            )
        except errors.VastNotFoundError:
            return None

    # --- changing instances --------------------------------------------------------------------

    def destroy_instance(self, instance_id: int) -> bool:
        """Destroy; `True` if this call destroyed it, `False` if it was already gone."""
        try:
            self._call(endpoints.DESTROY, parse.acknowledged, instance_id=instance_id, json={})
        except errors.VastNotFoundError:
            return False
        return True

    def destroy_instances(self, instance_ids: Iterable[int]) -> None:
        """Destroy several in one call (`DELETE /api/v0/instances/`).

        vast's answer does not say which ones it destroyed; confirm with a listing.
        """
        ids = sorted({int(i) for i in instance_ids})
        if ids:
            body = wire.bulk_destroy_body(ids)
            self._call(endpoints.BULK_DESTROY, parse.acknowledged, json=body)

    def stop_instance(self, instance_id: int) -> None:
        self._call(
            endpoints.STOP,
            parse.acknowledged,
            instance_id=instance_id,
            json=wire.state_body("stopped"),
        )

    def start_instance(self, instance_id: int) -> None:
        self._call(
            endpoints.START,
            parse.acknowledged,
            instance_id=instance_id,
            json=wire.state_body("running"),
        )

    def label_instance(self, instance_id: int, label: str) -> None:
        self._call(
            endpoints.LABEL,
            parse.acknowledged,
            instance_id=instance_id,
            json=wire.label_body(label),
        )

    def reboot_instance(self, instance_id: int) -> None:
        """Reboot; retried only when vast certainly did not act (a repeat reboots twice)."""
        self._call(
            endpoints.REBOOT,
            parse.acknowledged,
            policy=retry_mod.Policy.REFUSED_ONLY,
            instance_id=instance_id,
            json={},
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the one request path ------------------------------------------------------------------

    def _call(
        self,
        op: endpoints.Operation,
        interpret: Callable[[object], T],
        *,
        policy: retry_mod.Policy = retry_mod.Policy.TRANSIENT,
        instance_id: int | None = None,
        json: object = None,
        params: Mapping[str, str] | None = None,
    ) -> T:
        """One operation with its retry policy; raises the last error if retries run out."""
        retrying = retry_mod.retrying(
            policy,
            operation=op.name,
            settings=self._settings.retry,
            clock=self._clock,
            deadline_at=self._clock.now() + self._settings.retry.deadline,
            rng=self._rng,
        )
        result: T = retrying(self._attempt, op, interpret, instance_id, json, params)
        return result

    def _attempt(
        self,
        op: endpoints.Operation,
        interpret: Callable[[object], T],
        instance_id: int | None,
        json: object,
        params: Mapping[str, str] | None,
    ) -> T:
        """One HTTP request, counted once with its final outcome."""
        try:
            result = self._exchange(op, interpret, instance_id, json, params)
        except errors.VastError as exc:
            self._counters.add(op.name, counters.outcome_of(exc))
            raise
        self._counters.add(op.name, counters.OK)
        return result

    def _exchange(
        self,
        op: endpoints.Operation,
        interpret: Callable[[object], T],
        instance_id: int | None,
        json: object,
        params: Mapping[str, str] | None,
    ) -> T:
        path = op.path_for(instance_id)
        where = f"{op.method} {path}"
        self._pacer.wait_turn(op.route)
        try:
            response = self._http.request(
                op.method,
                self._base_url + path,
                json=json,
                params=params,
                headers=self._headers(),
            )
        except httpx.HTTPError as exc:
            raise classify.transport_error(
                operation=op.name, where=where, exc=exc, redactor=self._redactor
            ) from None
        error = classify.response_error(
            operation=op.name,
            where=where,
            status=response.status_code,
            headers=response.headers,
            body=response.content,
            redactor=self._redactor,
            now=self._clock.now(),
        )
        if error is not None:
            if isinstance(error, errors.VastRateLimitError) and error.retry_after:
                # Capped: a daily quota's reset must not park every caller for hours.
                cap = self._settings.retry.max_retry_after
                self._pacer.hold_off(op.route, min(error.retry_after, cap))
            raise error
        return self._interpret(op, where, response, interpret)

    def _interpret(
        self,
        op: endpoints.Operation,
        where: str,
        response: httpx.Response,
        interpret: Callable[[object], T],
    ) -> T:
        payload = classify.decode_json(response.content)
        try:
            if payload is None:
                raise parse.ParseError("body is not JSON")
            return interpret(payload)
        except parse.ParseError as exc:
            excerpt = self._redactor.excerpt(response.content)
            raise errors.VastProtocolError(
                f"{where}: HTTP {response.status_code}: {exc}: {excerpt}",
                operation=op.name,
                status=response.status_code,
            ) from None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key.reveal()}", "Accept": "application/json"}


def _origin(base_url: str) -> str:
    """`scheme://host[:port][/prefix]` without a trailing slash; refuses anything else.

    A URL with credentials or a query could carry the API key into logs, so it is refused, and the
    message does not repeat the URL.
    """
    try:
        url = httpx.URL(base_url.strip())
    except httpx.InvalidURL:
        raise errors.VastConfigError("the vast base URL is not a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise errors.VastConfigError("the vast base URL must be http(s)://host[:port]")
    if url.query or url.fragment or url.userinfo:
        raise errors.VastConfigError(
            "the vast base URL must not carry credentials, a query or a fragment "
            "(the API key goes in VAST_API_KEY, never in the URL)"
        )
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}{url.path.rstrip('/')}"
