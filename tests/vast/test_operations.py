"""Each client operation sends what vast expects and reads what vast answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from reconciler.model import observed
from reconciler.vast import VastClient, errors

from .vast_helpers import (
    API_KEY,
    Reply,
    ScriptedVast,
    instance_row,
    offer_row,
    page,
    reply,
)

LIST = "/api/v1/instances/"


def create_request(**overrides: Any) -> observed.CreateRequest:
    fields: dict[str, Any] = {
        "image": "img",
        "disk_gb": 20,
        "label": "rv.c.abcdef12.r9",
        "ports": (22,),
        "args": ("boot",),
    }
    fields.update(overrides)
    return observed.CreateRequest(**fields)


def test_search_posts_the_query_and_returns_offers_cheapest_first(
    vast: ScriptedVast, client: VastClient
) -> None:
    rows = [offer_row(3, 0.9), offer_row(1, 0.2), offer_row(2, 0.5)]
    vast.on("POST", "/api/v0/bundles/", reply(200, {"offers": rows}))
    offers = client.search_offers(observed.OfferSearch.of({"num_gpus": {"eq": 1}}))
    assert [o.id for o in offers] == [1, 2, 3]
    (body,) = vast.bodies("POST", "/api/v0/bundles/")
    assert body["num_gpus"] == {"eq": 1}
    assert body["order"] == [["dph_total", "asc"]]


def test_search_keeps_the_cheapest_when_the_server_ignores_the_limit(
    vast: ScriptedVast, client: VastClient
) -> None:
    rows = [offer_row(i, 1.0 / i) for i in range(1, 6)]
    vast.on("POST", "/api/v0/bundles/", reply(200, {"offers": rows}))
    offers = client.search_offers(observed.OfferSearch(limit=2))
    assert [o.id for o in offers] == [5, 4]


def test_every_request_carries_the_key_as_bearer_and_nowhere_else(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on("GET", "/api/v0/instances/5/", reply(200, {"instances": instance_row(5)}))
    client.show_instance(5)
    (request,) = vast.requests
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in str(request.url)
    assert request.url.params["owner"] == "me"


def test_create_puts_the_body_on_the_offer_and_returns_id_and_instance_key(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on(
        "PUT",
        "/api/v0/asks/42/",
        reply(200, {"success": True, "new_contract": 9001, "instance_api_key": "ik"}),
    )
    created = client.create_instance(42, create_request(bid_price=0.3))
    assert created == observed.CreatedInstance(9001, instance_api_key="ik")
    (body,) = vast.bodies("PUT", "/api/v0/asks/42/")
    assert body["client_id"] == "me"
    assert body["runtype"] == "args"
    assert body["env"] == {"-p 22:22": "1"}
    assert body["price"] == 0.3
    assert body["label"] == "rv.c.abcdef12.r9"


def test_listing_follows_next_token_to_the_end(vast: ScriptedVast, client: VastClient) -> None:
    vast.on(
        "GET",
        LIST,
        reply(200, page([instance_row(i) for i in range(1, 26)], "t1")),
        reply(200, page([instance_row(i) for i in range(26, 51)], "t2")),
        reply(200, page([instance_row(51)], None)),
    )
    instances = client.list_instances()
    assert [i.id for i in instances] == list(range(1, 52))
    tokens = [r.url.params.get("after_token") for r in vast.calls("GET", LIST)]
    assert tokens == [None, "t1", "t2"]
    assert all(r.url.params["limit"] == "25" for r in vast.calls("GET", LIST))


def test_listing_of_an_empty_account_is_empty(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("GET", LIST, reply(200, page([], None)))
    assert client.list_instances() == []


def test_listing_keeps_one_row_per_instance_when_pages_overlap(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on(
        "GET",
        LIST,
        reply(200, page([instance_row(1), instance_row(2, actual_status="loading")], "t1")),
        reply(200, page([instance_row(2, actual_status="running"), instance_row(3)], None)),
    )
    instances = client.list_instances()
    assert [i.id for i in instances] == [1, 2, 3]
    assert instances[1].actual_status == "running"


def test_a_failing_page_fails_the_whole_listing(vast: ScriptedVast, client: VastClient) -> None:
    vast.on(
        "GET",
        LIST,
        reply(200, page([instance_row(1)], "t1")),
        *[reply(503, text="<html>busy</html>")] * 8,
    )
    with pytest.raises(errors.VastServerError):
        client.list_instances()


def test_a_page_without_instances_fails_the_listing(vast: ScriptedVast, client: VastClient) -> None:
    vast.on(
        "GET",
        LIST,
        reply(200, page([instance_row(1)], "t1")),
        reply(200, {"success": True, "next_token": None}),
    )
    with pytest.raises(errors.VastProtocolError, match="instances"):
        client.list_instances()


def test_a_repeating_token_is_a_protocol_error_not_an_endless_loop(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on(
        "GET",
        LIST,
        reply(200, page([instance_row(1)], "t1")),
        reply(200, page([instance_row(2)], "t1")),
    )
    with pytest.raises(errors.VastProtocolError, match="repeats"):
        client.list_instances()


def test_listing_that_never_ends_is_cut_off(
    vast: ScriptedVast, make_client: Callable[..., VastClient]
) -> None:
    client = make_client(max_pages=3)
    vast.on("GET", LIST, *[reply(200, page([instance_row(i)], f"t{i}")) for i in range(3)])
    with pytest.raises(errors.VastProtocolError, match="3 pages"):
        client.list_instances()


def test_the_deprecated_v0_listing_is_never_called(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("GET", LIST, reply(200, page([], None)))
    client.list_instances()
    assert not vast.calls("GET", "/api/v0/instances/")


def test_show_returns_the_instance(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("GET", "/api/v0/instances/5/", reply(200, {"instances": instance_row(5)}))
    shown = client.show_instance(5)
    assert shown is not None
    assert shown.id == 5


@pytest.mark.parametrize(
    "gone",
    [
        reply(200, {"instances": None}),
        reply(404, {"success": False, "error": "no_such_instance"}),
        reply(404, {"success": False, "error": "not_found", "msg": "Instance not found"}),
    ],
    ids=["instances-null", "404-no-such-instance", "404-not-found"],
)
def test_show_of_a_gone_instance_is_none(
    vast: ScriptedVast, client: VastClient, gone: Reply
) -> None:
    vast.on("GET", "/api/v0/instances/5/", gone)
    assert client.show_instance(5) is None


def test_show_of_another_instance_is_a_protocol_error(
    vast: ScriptedVast, client: VastClient
) -> None:
    vast.on("GET", "/api/v0/instances/5/", reply(200, {"instances": instance_row(6)}))
    with pytest.raises(errors.VastProtocolError, match="asked for instance 5"):
        client.show_instance(5)


def test_show_with_a_revoked_key_raises_instead_of_saying_gone(
    vast: ScriptedVast, client: VastClient
) -> None:
    body = {"success": False, "error": "auth_error", "msg": "Invalid user key"}
    vast.on("GET", "/api/v0/instances/5/", reply(404, body))
    with pytest.raises(errors.VastAuthError):
        client.show_instance(5)


def test_destroy_returns_true_when_it_destroyed(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("DELETE", "/api/v0/instances/5/", reply(200, {"success": True}))
    assert client.destroy_instance(5) is True
    assert vast.bodies("DELETE", "/api/v0/instances/5/") == [{}]


@pytest.mark.parametrize(
    "gone",
    [
        reply(404, {"error": "no_such_instance"}),
        reply(404, {"success": False, "error": "not_found", "msg": "Instance not found"}),
        reply(200, {"success": False, "error": "no_such_instance", "msg": "gone"}),
    ],
    ids=["404-no-such-instance", "404-not-found", "200-success-false"],
)
def test_destroying_a_gone_instance_is_success(
    vast: ScriptedVast, client: VastClient, gone: Reply
) -> None:
    vast.on("DELETE", "/api/v0/instances/5/", gone)
    assert client.destroy_instance(5) is False


@pytest.mark.parametrize(
    "not_gone",
    [
        reply(404, {"success": False, "error": "auth_error", "msg": "Invalid user key"}),
        reply(404, text="<html>404 Not Found</html>"),
        reply(404, {"detail": "Not Found"}),
    ],
    ids=["revoked-key", "html-404", "framework-404"],
)
def test_a_404_that_is_not_vasts_gone_does_not_count_as_destroyed(
    vast: ScriptedVast, client: VastClient, not_gone: Reply
) -> None:
    vast.on("DELETE", "/api/v0/instances/5/", not_gone)
    with pytest.raises((errors.VastAuthError, errors.VastProtocolError)):
        client.destroy_instance(5)


def test_bulk_destroy_sends_the_ids_once(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("DELETE", "/api/v0/instances/", reply(200, {"success": True}))
    client.destroy_instances([3, 1, 3, 2])
    assert vast.bodies("DELETE", "/api/v0/instances/") == [{"instance_ids": [1, 2, 3]}]


def test_bulk_destroy_of_nothing_sends_nothing(vast: ScriptedVast, client: VastClient) -> None:
    client.destroy_instances([])
    assert vast.requests == []


@pytest.mark.parametrize(
    ("call", "path", "body"),
    [
        (lambda c: c.stop_instance(5), "/api/v0/instances/5/", {"state": "stopped"}),
        (lambda c: c.start_instance(5), "/api/v0/instances/5/", {"state": "running"}),
        (lambda c: c.label_instance(5, "rv.c.x.1"), "/api/v0/instances/5/", {"label": "rv.c.x.1"}),
        (lambda c: c.reboot_instance(5), "/api/v0/instances/reboot/5/", {}),
    ],
    ids=["stop", "start", "label", "reboot"],
)
def test_instance_mutations_put_their_body(
    vast: ScriptedVast,
    client: VastClient,
    call: Callable[[VastClient], None],
    path: str,
    body: object,
) -> None:
    vast.on("PUT", path, reply(200, {"success": True}))
    call(client)
    assert vast.bodies("PUT", path) == [body]


def test_stopping_a_gone_instance_raises_not_found(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("PUT", "/api/v0/instances/5/", reply(404, {"error": "no_such_instance"}))
    with pytest.raises(errors.VastNotFoundError):
        client.stop_instance(5)


def test_a_refusal_with_200_is_still_an_error(vast: ScriptedVast, client: VastClient) -> None:
    vast.on(
        "PUT",
        "/api/v0/instances/5/",
        reply(200, {"success": False, "error": "invalid_args", "msg": "label too long"}),
    )
    with pytest.raises(errors.VastRejectedError) as info:
        client.label_instance(5, "x" * 2000)
    assert info.value.code == "invalid_args"


@pytest.mark.parametrize(
    "bad",
    [reply(200, text="<html>maintenance</html>"), reply(200, text=""), reply(200, [1, 2])],
    ids=["html", "empty", "array"],
)
def test_a_success_status_with_a_body_vast_never_sends_is_an_error(
    vast: ScriptedVast, client: VastClient, bad: Reply
) -> None:
    vast.on("POST", "/api/v0/bundles/", bad)
    with pytest.raises(errors.VastProtocolError):
        client.search_offers(observed.OfferSearch())


def test_requests_carry_json_bodies(vast: ScriptedVast, client: VastClient) -> None:
    vast.on("PUT", "/api/v0/instances/5/", reply(200, {"success": True}))
    client.stop_instance(5)
    (request,) = vast.requests
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"state": "stopped"}
