"""Request bodies and query parameters exactly as vast expects them.

Pure functions from our request types to JSON-ready data, kept apart from the client so the shapes
can be compared with what the official `vastai` CLI sends (`reference/vast-api.md` sections 4-6).
Filter values are sent as real JSON numbers and booleans (as the docs, dstack and gpuhunt do), not
as the CLI's numeric strings.
"""

from __future__ import annotations

import json

from reconciler.model import observed
from reconciler.vast.parse import INSTANCE_COLUMNS

# ray-vast always rents the cheapest acceptable offer first; the order is not configurable.
SEARCH_ORDER = (("dph_total", "asc"),)
LIST_ORDER = ({"col": "id", "dir": "asc"},)
SHOW_PARAMS = {"owner": "me"}


def search_body(query: observed.OfferSearch) -> dict[str, object]:
    body: dict[str, object] = {}
    for f in query.filters:
        value = list(f.value) if isinstance(f.value, tuple) else f.value
        ops = body.setdefault(f.field, {})
        assert isinstance(ops, dict)  # only filters have been added so far
        ops[f.op] = value
    body["order"] = [list(pair) for pair in SEARCH_ORDER]
    body["type"] = query.type
    body["limit"] = query.limit
    body["allocated_storage"] = float(query.allocated_storage)
    return body


def create_body(request: observed.CreateRequest) -> dict[str, object]:
    env: dict[str, str] = dict(request.env)
    for port in request.ports:
        env[f"-p {port}:{port}"] = "1"
    body: dict[str, object] = {
        "client_id": "me",
        "image": request.image,
        "disk": float(request.disk_gb),
        "label": request.label,
        "env": env,
        "runtype": "args",
        "args": list(request.args),
        "onstart": request.onstart,
    }
    if request.bid_price is not None:
        body["price"] = float(request.bid_price)
    return body


def list_params(*, after_token: str | None, page_size: int) -> dict[str, str]:
    """Query of one page of `GET /api/v1/instances/`; values JSON-encoded, as the CLI sends them.
    Only the columns the parser reads are asked for (`select_cols`, as the CLI's table view asks;
    vast answers a column it does not know with null, which the parser takes as absent)."""
    params = {
        "select_filters": json.dumps({}),
        "order_by": json.dumps(list(LIST_ORDER)),
        "limit": str(page_size),
        "select_cols": json.dumps(list(INSTANCE_COLUMNS)),
    }
    if after_token:
        params["after_token"] = after_token
    return params


def state_body(state: str) -> dict[str, object]:
    return {"state": state}


def label_body(label: str) -> dict[str, object]:
    return {"label": label}


def bulk_destroy_body(instance_ids: list[int]) -> dict[str, object]:
    return {"instance_ids": instance_ids}
