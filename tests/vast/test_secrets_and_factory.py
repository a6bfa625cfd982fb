"""The API key goes in the Authorization header and nowhere else; the factory reads only what
it is handed."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

import httpx
import pytest

from reconciler.clock import FakeClock
from reconciler.model import observed
from reconciler.vast import VastClient, VastConfigError, client_from_settings, errors

from .vast_helpers import API_KEY, ScriptedVast, fail, instance_row, page, reply


def all_text_of(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args)


def test_client_repr_hides_the_key(client: VastClient) -> None:
    assert API_KEY not in repr(client)
    assert API_KEY not in str(client)
    assert "***" in repr(client)


@pytest.mark.parametrize(
    "answer",
    [
        reply(401, {"error": "auth_error", "msg": f"Invalid user key {API_KEY}"}),
        reply(500, text=f"<html>Authorization: Bearer {API_KEY}</html>"),
        reply(404, text=f"<html>GET /api/v1/instances/?api_key={API_KEY}</html>"),
        fail(httpx.ConnectError, f"cannot connect to http://vast.test/?api_key={API_KEY}"),
    ],
    ids=["echoed-in-json", "echoed-in-html", "in-a-url", "in-a-transport-error"],
)
def test_errors_never_carry_the_key_even_when_vast_echoes_it(
    vast: ScriptedVast,
    make_client: Callable[..., VastClient],
    answer: Callable[[httpx.Request], httpx.Response],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_client(retry=None)
    vast.on("GET", "/api/v1/instances/", *[answer] * 8)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(errors.VastError) as info:
        client.list_instances()
    assert API_KEY not in all_text_of(info.value)
    assert API_KEY[:12] not in all_text_of(info.value)
    for record in caplog.records:
        assert API_KEY not in record.getMessage()


def test_no_request_line_log_record_or_header_but_authorization_has_the_key(
    vast: ScriptedVast, client: VastClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    vast.on(
        "GET", "/api/v1/instances/", reply(503, text=""), reply(200, page([instance_row(1)], None))
    )
    vast.on("PUT", "/api/v0/asks/3/", fail(httpx.ReadTimeout))
    vast.on("DELETE", "/api/v0/instances/1/", reply(200, {"success": True}))
    client.list_instances()
    client.destroy_instance(1)
    with pytest.raises(errors.CreateOutcomeUnknownError) as info:
        client.create_instance(3, observed.CreateRequest(image="i", disk_gb=1, label="l"))
    assert API_KEY not in all_text_of(info.value)
    assert caplog.records, "the retry and the unknown create are logged"
    for record in caplog.records:
        assert API_KEY not in record.getMessage()
    for request in vast.requests:
        assert API_KEY not in str(request.url)
        assert API_KEY not in request.content.decode()
        for name, value in request.headers.items():
            assert (API_KEY in value) == (name == "authorization")


@pytest.mark.parametrize(
    "url",
    [
        f"https://console.vast.ai/?api_key={API_KEY}",
        f"https://user:{API_KEY}@console.vast.ai",
        f"https://console.vast.ai/#{API_KEY}",
        "ftp://console.vast.ai",
        "console.vast.ai",
    ],
)
def test_a_base_url_that_is_not_an_origin_is_refused_without_echoing_it(
    url: str, clock: FakeClock
) -> None:
    with pytest.raises(VastConfigError) as info:
        client_from_settings(env={"VAST_API_KEY": "k", "VAST_URL": url}, spec_url=None, clock=clock)
    assert API_KEY not in str(info.value)


@pytest.mark.parametrize("env", [{}, {"VAST_API_KEY": ""}, {"VAST_API_KEY": "  \n"}])
def test_a_missing_key_is_an_error_naming_the_variable(
    env: dict[str, str], clock: FakeClock
) -> None:
    with pytest.raises(VastConfigError, match="VAST_API_KEY"):
        client_from_settings(env=env, spec_url="http://sim.test", clock=clock)


def hosts_reached(env: dict[str, str], spec_url: str | None, clock: FakeClock) -> list[str]:
    seen: list[str] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.url.scheme}://{request.url.netloc.decode()}")
        assert request.headers["authorization"] == "Bearer key-1"
        return httpx.Response(200, json=page([], None))

    with client_from_settings(
        env=env, spec_url=spec_url, clock=clock, transport=httpx.MockTransport(record)
    ) as client:
        client.list_instances()
    return seen


def test_vast_url_overrides_the_spec_url(clock: FakeClock) -> None:
    env = {"VAST_API_KEY": "key-1", "VAST_URL": "http://127.0.0.1:8765/"}
    assert hosts_reached(env, "http://sim.test", clock) == ["http://127.0.0.1:8765"]


def test_the_spec_url_is_used_without_vast_url(clock: FakeClock) -> None:
    assert hosts_reached({"VAST_API_KEY": "key-1"}, "http://sim.test", clock) == ["http://sim.test"]


def test_the_default_is_vasts_console(clock: FakeClock) -> None:
    assert hosts_reached({"VAST_API_KEY": "key-1"}, None, clock) == ["https://console.vast.ai"]


def test_the_factory_closes_the_http_client_it_built(clock: FakeClock) -> None:
    client = client_from_settings(
        env={"VAST_API_KEY": "k"},
        spec_url=None,
        clock=clock,
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=page([], None))),
    )
    client.close()
    with pytest.raises(RuntimeError):
        client.list_instances()
