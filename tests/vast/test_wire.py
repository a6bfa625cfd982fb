"""Request bodies as vast expects them, and the request types that refuse nonsense early."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.model import observed
from reconciler.vast import parse, wire


def test_search_body_is_the_filter_dict_plus_fixed_order_and_controls() -> None:
    search = observed.OfferSearch.of(
        {
            "num_gpus": {"eq": 1},
            "gpu_name": {"in": ["RTX 4090", "RTX 3090"]},
            "reliability": {"gte": 0.98},
            "dph_total": {"lt": 1.5, "gt": 0.1},
            "rented": {"eq": False},
        },
        type="bid",
        limit=50,
        allocated_storage=40,
    )
    assert wire.search_body(search) == {
        "num_gpus": {"eq": 1},
        "gpu_name": {"in": ["RTX 4090", "RTX 3090"]},
        "reliability": {"gte": 0.98},
        "dph_total": {"lt": 1.5, "gt": 0.1},
        "rented": {"eq": False},
        "order": [["dph_total", "asc"]],
        "type": "bid",
        "limit": 50,
        "allocated_storage": 40.0,
    }


def test_search_order_cannot_be_smuggled_in_as_a_filter() -> None:
    with pytest.raises(ValueError, match="order"):
        observed.OfferSearch.of({"order": {"eq": "score"}})


@pytest.mark.parametrize(
    "filters",
    [
        {"num_gpus": {"approx": 1}},
        {"gpu_name": {"in": "RTX 4090"}},
        {"num_gpus": {"eq": [1, 2]}},
    ],
)
def test_bad_filters_are_refused(filters: Any) -> None:
    with pytest.raises(ValueError):
        observed.OfferSearch.of(filters)


@pytest.mark.parametrize("kwargs", [{"type": "reserved"}, {"limit": 0}, {"allocated_storage": 0}])
def test_bad_search_controls_are_refused(kwargs: Any) -> None:
    with pytest.raises(ValueError):
        observed.OfferSearch.of({}, **kwargs)


def request(**overrides: Any) -> observed.CreateRequest:
    fields: dict[str, Any] = {
        "image": "ghcr.io/x/ray:2.9",
        "disk_gb": 40,
        "label": "rv.c.abcdef12.r1",
        "env": {"RV_TOKEN": "t0ken", "TZ": "UTC"},
        "ports": (22, 6379),
        "args": ("python3", "-m", "boot"),
        "onstart": None,
    }
    fields.update(overrides)
    return observed.CreateRequest(**fields)


def test_create_body_on_demand() -> None:
    body = wire.create_body(request())
    assert body == {
        "client_id": "me",
        "image": "ghcr.io/x/ray:2.9",
        "disk": 40.0,
        "label": "rv.c.abcdef12.r1",
        "env": {"RV_TOKEN": "t0ken", "TZ": "UTC", "-p 22:22": "1", "-p 6379:6379": "1"},
        "runtype": "args",
        "args": ["python3", "-m", "boot"],
        "onstart": None,
    }
    assert "price" not in body  # no price means on-demand
    json.dumps(body)


def test_create_body_bid_carries_the_price() -> None:
    assert wire.create_body(request(bid_price=0.25))["price"] == 0.25


def test_create_request_hides_env_args_and_onstart_from_repr() -> None:
    text = repr(request(onstart="echo s3cret"))
    assert "t0ken" not in text
    assert "s3cret" not in text
    assert "boot" not in text


@pytest.mark.parametrize(
    "overrides",
    [{"label": " "}, {"disk_gb": 0}, {"bid_price": 0}, {"ports": (0,)}, {"ports": (100_000,)}],
)
def test_create_request_refuses_nonsense(overrides: Any) -> None:
    with pytest.raises(ValueError):
        request(**overrides)


def test_create_request_does_not_share_the_callers_env_dict() -> None:
    env = {"A": "1"}
    req = request(env=env)
    env["A"] = "2"
    assert req.env == {"A": "1"}


def test_list_params_are_json_encoded_like_the_cli_sends_them() -> None:
    params = wire.list_params(after_token=None, page_size=25)
    assert json.loads(params["select_filters"]) == {}
    assert json.loads(params["order_by"]) == [{"col": "id", "dir": "asc"}]
    assert params["limit"] == "25"
    assert "after_token" not in params
    assert wire.list_params(after_token="t2", page_size=25)["after_token"] == "t2"


class _Watched(dict[str, object]):
    """A row that remembers which keys were read."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> object:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def test_the_listing_asks_for_every_column_the_parser_reads_and_no_other() -> None:
    """`select_cols` trims each row to what `parse.instance` reads: a column it reads but the
    listing did not ask for would come back null and silently read as absent."""
    row = _Watched({"id": 7, "actual_status": "running", "ports": {}, "machine_id": 1})
    parse.instance(row)
    params = wire.list_params(after_token=None, page_size=25)
    assert set(json.loads(params["select_cols"])) == row.read
