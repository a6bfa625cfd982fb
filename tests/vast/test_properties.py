"""Properties over arbitrary wire input: the boundary only ever answers with data or a VastError.

- whatever vast sends, classification and parsing fail only with our own error types;
- whatever vast sends back, the key it may echo never reaches a message;
- whatever mix of good and failing pages a listing meets, it returns every row or raises: never a
  partial listing.
"""

from __future__ import annotations

import contextlib
import json
import random
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.clock import FakeClock
from reconciler.vast import ClientSettings, RetrySettings, VastClient, classify, errors, parse
from reconciler.vast import redaction as redaction_mod

from .vast_helpers import ScriptedVast, fail, instance_row, page, reply

KEY = "prop-key-5f3a9c"
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=6)
    ),
    max_leaves=25,
)
row_like = st.dictionaries(
    st.sampled_from(["id", "label", "ports", "dph_total", "actual_status", "start_date", "x"]),
    json_values,
)


@given(
    status=st.integers(100, 599),
    body=st.one_of(
        st.binary(max_size=200),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.text(max_size=100).map(lambda t: f"{t} {KEY} {t}".encode()),
    ),
    retry_after=st.one_of(
        st.none(),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
        st.sampled_from(["Wed, 21 Oct 2015 07:28:00 GMT", "Mon, 99 Foo 2015", "-3", "1e400"]),
    ),
)
def test_classification_never_raises_and_never_leaks_the_key(
    status: int, body: bytes, retry_after: str | None
) -> None:
    headers = httpx.Headers({"Retry-After": retry_after} if retry_after is not None else {})
    error = classify.response_error(
        operation="op",
        where="GET /x",
        status=status,
        headers=headers,
        body=body,
        redactor=redaction_mod.Redactor([KEY]),
        now=1_790_000_000.0,
    )
    if status >= 400:
        assert isinstance(error, errors.VastError)
    if error is not None:
        assert KEY not in str(error)
        if isinstance(error, errors.VastRateLimitError) and error.retry_after is not None:
            assert error.retry_after >= 0


@settings(max_examples=60)
@given(payload=st.one_of(json_values, st.fixed_dictionaries({"instances": st.lists(row_like)})))
def test_parsing_fails_only_with_parse_errors(payload: Any) -> None:
    for parser in (parse.instance_page, parse.offers, parse.shown_instance, parse.created):
        with contextlib.suppress(parse.ParseError):
            parser(payload)


PAGE_FAILURES = {
    "503-then-ok": [reply(503, text="")],
    "timeout-then-ok": [fail(httpx.ReadTimeout)],
    "html-500": [reply(500, text="<html>oops</html>")],
    "no-instances-key": [reply(200, {"next_token": None})],
    "always-429": [reply(429, text="API requests too frequent")] * 3,
}


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 25), min_size=1, max_size=5),
    trouble=st.lists(st.sampled_from([None, *PAGE_FAILURES]), min_size=5, max_size=5),
)
def test_a_listing_returns_every_row_or_raises(sizes: list[int], trouble: list[str | None]) -> None:
    vast = ScriptedVast()
    expected: list[int] = []
    next_id = 1
    fatal = False
    for index, size in enumerate(sizes):
        rows = [instance_row(i) for i in range(next_id, next_id + size)]
        next_id += size
        token = f"t{index + 1}" if index + 1 < len(sizes) else None
        failure = trouble[index]
        if failure is not None:
            vast.on("GET", "/api/v1/instances/", *PAGE_FAILURES[failure])
            fatal = fatal or failure in ("html-500", "no-instances-key", "always-429")
        vast.on("GET", "/api/v1/instances/", reply(200, page(rows, token)))
        expected.extend(r["id"] for r in rows)
    client = VastClient(
        http=httpx.Client(transport=httpx.MockTransport(vast)),
        base_url="http://vast.test",
        api_key=KEY,
        clock=FakeClock(),
        settings=ClientSettings(retry=RetrySettings(max_attempts=3)),
        rng=random.Random(0),
        owns_http=True,
    )
    with client:
        if fatal:
            with pytest.raises(errors.VastError):
                client.list_instances()
        else:
            assert [i.id for i in client.list_instances()] == expected
