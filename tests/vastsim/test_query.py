"""The query engine, driven by the request bodies the reference captured from the official CLI
(section 4.1) and by the spellings other clients use."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from vastsim import InProcessTransport, Market, Sim, VirtualClock
from vastsim.query import Condition, QueryError, compare, parse_offer_query

from .conftest import KEY, T0

# CAP: vastai search offers 'reliability > 0.98 num_gpus=1 gpu_name=RTX_4090 geolocation in
# [US,CA] cpu_ram>=32 dph<1.5 verified=any' -o 'dph_total,reliability-' --limit 5 --raw
CAPTURED_SEARCH = {
    "external": {"eq": False},
    "rentable": {"eq": True},
    "reliability": {"gt": "0.98"},
    "num_gpus": {"eq": "1"},
    "gpu_name": {"eq": "RTX 4090"},
    "geolocation": {"in": ["US", "CA"]},
    "cpu_ram": {"gte": 32000.0},
    "dph_total": {"lt": "1.5"},
    "order": [["dph_total", "asc"], ["reliability", "desc"]],
    "type": "on-demand",
    "limit": 5,
    "allocated_storage": 5.0,
}
# CAP: vastai search offers --raw -n --storage 50 -b
CAPTURED_BID_SEARCH = {"order": [["score", "desc"]], "type": "bid", "allocated_storage": 50.0}


def machine(mid: int, **fields: Any) -> dict[str, Any]:
    base = {
        "machine_id": mid,
        "host_id": 100 + mid,
        "gpu_name": "RTX 4090",
        "num_gpus": 1,
        "dph_base": 0.40,
        "reliability": 0.99,
        "geolocation": "Texas, US",
        "cpu_ram_gb": 64,
        "storage_cost": 0.15,
    }
    return {**base, **fields}


MARKET = {
    "machines": [
        machine(1, dph_base=0.40),  # passes
        machine(2, dph_base=0.30, reliability=0.985, geolocation="Quebec, CA", cpu_ram_gb=32),
        machine(3, dph_base=0.20, reliability=0.97),  # reliability too low
        machine(4, dph_base=0.25, geolocation="Hesse, DE"),  # wrong country
        machine(5, dph_base=0.35, cpu_ram_gb=16),  # too little RAM
        machine(6, dph_base=0.10, gpu_name="RTX 3090"),  # wrong GPU
        machine(7, dph_base=0.45, num_gpus=2),  # its 1-GPU bundle passes, the 2-GPU one not
        machine(8, dph_base=1.60),  # too expensive
        machine(9, dph_base=0.28, verification="unverified", reliability=0.99),  # passes
        machine(10, dph_base=0.28, reliability=0.995, min_bid=0.05),  # ties 9 on price
    ]
}


@pytest.fixture
def market_client() -> Any:
    sim = Sim(market=Market.from_dict(MARKET), clock=VirtualClock(start=T0), api_key=KEY)
    with httpx.Client(
        transport=InProcessTransport(sim),
        base_url="http://vastsim.test",
        headers={"Authorization": f"Bearer {KEY}"},
    ) as client:
        yield client
    sim.shutdown()


def search(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = client.post("/api/v0/bundles/", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    result: list[dict[str, Any]] = response.json()["offers"]
    return result


def test_captured_cli_search_filters_orders_and_limits(market_client: httpx.Client) -> None:
    found = search(market_client, CAPTURED_SEARCH)
    # cheapest first; the two 0.28 offers are ordered by reliability, descending
    assert [(o["machine_id"], o["num_gpus"]) for o in found] == [
        (10, 1),
        (9, 1),
        (2, 1),
        (1, 1),
        (7, 1),
    ]
    for offer in found:
        assert offer["dph_total"] == pytest.approx(offer["dph_base"] + 5.0 * 0.15 / 720)
        assert offer["reliability"] > 0.98
        assert offer["cpu_ram"] >= 32000


def test_limit_applies_after_order(market_client: httpx.Client) -> None:
    body = {**CAPTURED_SEARCH, "limit": 2}
    assert [o["machine_id"] for o in search(market_client, body)] == [10, 9]


def test_captured_bid_search_prices_at_min_bid_with_storage(market_client: httpx.Client) -> None:
    found = search(market_client, CAPTURED_BID_SEARCH)
    assert len(found) == 11  # every bundle of every machine (machine 7 has two)
    scores = [o["score"] for o in found]
    assert scores == sorted(scores, reverse=True)
    for offer in found:
        assert offer["is_bid"] is True
        assert offer["dph_total"] == pytest.approx(offer["min_bid"] + 50.0 * 0.15 / 720)
    cheap = next(o for o in found if o["machine_id"] == 10)
    assert cheap["min_bid"] == pytest.approx(0.05)


def test_cli_default_filters_verified_external_rentable(market_client: httpx.Client) -> None:
    body = {"verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True}}
    ids = {o["machine_id"] for o in search(market_client, body)}
    assert 9 not in ids  # unverified
    assert ids == {1, 2, 3, 4, 5, 6, 7, 8, 10}
    unverified = search(market_client, {"verified": {"eq": False}})
    assert {o["machine_id"] for o in unverified} == {9}


def test_offers_have_no_verified_key_and_external_is_null(market_client: httpx.Client) -> None:
    offer = search(market_client, {"limit": 1})[0]
    assert "verified" not in offer
    assert offer["verification"] == "verified"
    assert offer["external"] is None
    assert offer["hosting_type"] in (0, 1)
    assert offer["id"] == offer["ask_contract_id"]


@pytest.mark.parametrize("name", ["RTX_4090", "RTX 4090", "rtx_4090"])
def test_gpu_name_underscore_or_space(market_client: httpx.Client, name: str) -> None:
    found = search(market_client, {"gpu_name": {"eq": name}})
    assert found
    assert {o["gpu_name"] for o in found} == {"RTX 4090"}


def test_geolocation_matches_trailing_country_code(market_client: httpx.Client) -> None:
    found = search(market_client, {"geolocation": {"in": ["CA", "DE"]}})
    assert {o["machine_id"] for o in found} == {2, 4}
    exact = search(market_client, {"geolocation": {"eq": "Hesse, DE"}})
    assert {o["machine_id"] for o in exact} == {4}
    outside = search(market_client, {"geolocation": {"notin": ["US"]}})
    assert {o["machine_id"] for o in outside} == {2, 4}


def test_aliases_dph_and_cuda_vers(market_client: httpx.Client) -> None:
    by_alias = search(market_client, {"dph": {"lte": "0.3"}, "order": [["dph", "asc"]]})
    assert [o["machine_id"] for o in by_alias][:3] == [6, 3, 4]
    assert {o["machine_id"] for o in by_alias} == {6, 3, 4, 9, 10}
    cuda = search(market_client, {"cuda_vers": {"gte": "12.4"}})
    assert len(cuda) == 11
    assert search(market_client, {"cuda_vers": {"gt": 13}}) == []


def test_numeric_strings_are_coerced(market_client: httpx.Client) -> None:
    as_strings = search(market_client, {"num_gpus": {"in": ["2"]}, "machine_id": {"eq": "7"}})
    assert [(o["machine_id"], o["num_gpus"]) for o in as_strings] == [(7, 2)]
    assert search(market_client, {"machine_id": {"neq": "7"}, "num_gpus": {"gte": "2"}}) == []


def test_id_and_ask_contract_id(market_client: httpx.Client) -> None:
    offer_id = search(market_client, {"machine_id": {"eq": 2}})[0]["id"]
    assert [o["id"] for o in search(market_client, {"id": {"eq": offer_id}})] == [offer_id]
    by_ask = search(market_client, {"ask_contract_id": {"eq": str(offer_id)}})
    assert [o["id"] for o in by_ask] == [offer_id]


def test_unknown_control_keys_are_ignored(market_client: httpx.Client) -> None:
    body = {
        "machine_id": {"eq": 1},
        "disable_bundling": True,
        "target_reliability": 0.9,
        "extra_ids": [],
        "show_incompatible": False,
    }
    assert [o["machine_id"] for o in search(market_client, body)] == [1]


def test_type_spellings_and_reserved(market_client: httpx.Client) -> None:
    on_demand = search(market_client, {"type": "ondemand", "machine_id": {"eq": 10}})
    assert on_demand[0]["is_bid"] is False
    assert on_demand[0]["dph_total"] == pytest.approx(0.28 + 8.0 * 0.15 / 720)  # default storage
    reserved = search(market_client, {"type": "reserved", "machine_id": {"eq": 10}})
    assert reserved[0]["discounted_dph_total"] == pytest.approx(reserved[0]["dph_total"])
    response = market_client.post("/api/v0/bundles/", json={"type": "forever"})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_args"


def test_allocated_storage_prices_dph_total(market_client: httpx.Client) -> None:
    offer = search(market_client, {"machine_id": {"eq": 1}, "allocated_storage": 720})[0]
    assert offer["dph_total"] == pytest.approx(0.40 + 0.15)
    assert offer["storage_total_cost"] == pytest.approx(0.15)


def test_unknown_operator_is_refused(market_client: httpx.Client) -> None:
    response = market_client.post("/api/v0/bundles/", json={"num_gpus": {"about": 1}})
    assert response.status_code == 400
    assert response.json()["success"] is False


def test_search_asks_and_get_bundles_variants(market_client: httpx.Client) -> None:
    response = market_client.put(
        "/api/v0/search/asks/", json={"select_cols": ["*"], "q": {"machine_id": {"eq": 2}}}
    )
    assert response.status_code == 200
    assert response.json()["success"] is True
    assert [o["machine_id"] for o in response.json()["offers"]] == [2]
    got = market_client.get("/api/v0/bundles/", params={"q": '{"machine_id": {"eq": 3}}'})
    assert [o["machine_id"] for o in got.json()["offers"]] == [3]


def test_search_needs_no_key(market_client: httpx.Client) -> None:
    response = market_client.post(
        "/api/v0/bundles/", json={"limit": 1}, headers={"Authorization": ""}
    )
    assert response.status_code == 200
    assert len(response.json()["offers"]) == 1


@pytest.mark.parametrize(
    ("actual", "op", "expected", "result"),
    [
        (12.4, "gte", "12.4", True),
        (True, "eq", "true", True),
        (False, "eq", True, False),
        (None, "eq", None, True),
        (None, "gt", 1, False),
        (3, "in", ["1", "3"], True),
        (3, "notin", [3], False),
        ("a", "lt", "b", True),
    ],
)
def test_compare_coercions(actual: Any, op: str, expected: Any, result: bool) -> None:
    assert compare(actual, op, expected) is result


def test_parse_offer_query_defaults() -> None:
    query = parse_offer_query({"dph": {"lt": 1}, "order": [["dph", "desc"]]})
    assert query.conditions == (Condition("dph_total", "lt", 1),)
    assert query.order == (("dph_total", True),)
    assert query.kind == "on-demand"
    assert query.limit is None
    assert parse_offer_query({}).order == (("score", True),)
    with pytest.raises(QueryError):
        parse_offer_query({"limit": "many"})
