"""The v1 instance listing: filters, ordering, and keyset pagination with opaque tokens.

`GET /api/v1/instances/` takes JSON-encoded `select_filters`, `order_by`, `limit` (at most 25;
<= 0 means 5) and `after_token`. `id` is always the last sort key, so a token that records the sort
key of the last row of a page names a position exactly; it is signed, so a token that was not
issued by this simulator answers 400 `invalid_token`.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vastsim.instances import INDEX_COLUMNS
from vastsim.query import (
    Condition,
    QueryError,
    matches,
    parse_instance_filters,
    sort_key,
)

MAX_PAGE = 25
SMALL_PAGE = 5
ORDER_KEYS = frozenset(INDEX_COLUMNS)


class InvalidToken(ValueError):
    """The `after_token` was not issued by this simulator."""


def parse_listing(
    filters: Any, order_by: Any, limit: str | None, select_cols: Any
) -> tuple[tuple[Condition, ...], tuple[tuple[str, bool], ...], int, tuple[str, ...] | None]:
    if not isinstance(filters, dict):
        raise QueryError("invalid_request", "Error in query parameters: select_filters")
    conditions = tuple(parse_instance_filters(filters))
    order = _parse_order_by(order_by)
    return conditions, order, _parse_limit(limit), _parse_cols(select_cols)


def _parse_order_by(order_by: Any) -> tuple[tuple[str, bool], ...]:
    if not isinstance(order_by, list):
        raise QueryError("invalid_request", "Error in query parameters: order_by")
    order: list[tuple[str, bool]] = []
    for item in order_by:
        if not isinstance(item, dict) or not isinstance(item.get("col"), str):
            raise QueryError("invalid_request", "Error in query parameters: order_by")
        col = item["col"]
        if col not in ORDER_KEYS:
            raise QueryError(
                "invalid_request", f"Error in query parameters: {col} is not a valid order key"
            )
        order.append((col, str(item.get("dir", "asc")).lower() == "desc"))
    if all(col != "id" for col, _ in order):
        order.append(("id", False))
    return tuple(order)


def _parse_limit(limit: str | None) -> int:
    if limit is None or limit == "":
        return MAX_PAGE
    try:
        value = int(float(limit))
    except ValueError:
        raise QueryError("invalid_request", "Error in query parameters: limit") from None
    return SMALL_PAGE if value <= 0 else min(value, MAX_PAGE)


def _parse_cols(select_cols: Any) -> tuple[str, ...] | None:
    if select_cols is None:
        return None
    if not isinstance(select_cols, list) or not all(isinstance(c, str) for c in select_cols):
        raise QueryError("invalid_request", "Error in query parameters: select_cols")
    return None if "*" in select_cols else tuple(select_cols)


class Tokens:
    """Signed, opaque page tokens."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def issue(self, key: Sequence[Any], page: int) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"k": list(key), "p": page}).encode())
        text = payload.decode().rstrip("=")
        return f"{text}.{self._sign(text)}"

    def read(self, token: str) -> tuple[tuple[Any, ...], int]:
        text, _, signature = token.partition(".")
        if not text or not hmac.compare_digest(signature, self._sign(text)):
            raise InvalidToken(token)
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            return tuple(data["k"]), int(data["p"])
        except (ValueError, KeyError, TypeError):
            raise InvalidToken(token) from None

    def _sign(self, text: str) -> str:
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()[:20]


class _Desc:
    """A string that sorts backwards (descending text columns)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: _Desc) -> bool:
        return self.text > other.text

    def __gt__(self, other: _Desc) -> bool:
        return self.text < other.text


def order_key(values: Sequence[Any], order: Sequence[tuple[str, bool]]) -> tuple[Any, ...]:
    """A key that sorts ascending in `order` (nulls last ascending, first descending)."""
    parts: list[tuple[Any, ...]] = []
    for value, (_, descending) in zip(values, order, strict=False):
        null, kind, number, text = sort_key(value)
        parts.append(
            (-null, -kind, -number, _Desc(text)) if descending else (null, kind, number, text)
        )
    return tuple(parts)


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    total: int
    label_counts: dict[str, int]
    last_key: tuple[Any, ...] | None  # set when more rows follow


def select_page(
    rows: Sequence[Mapping[str, Any]],
    conditions: Sequence[Condition],
    order: Sequence[tuple[str, bool]],
    limit: int,
    after: Sequence[Any] | None,
) -> Page:
    hits = [row for row in rows if matches(row, conditions)]
    keyed = sorted(((order_key(_key(r, order), order), r) for r in hits), key=lambda kr: kr[0])
    start = 0
    if after is not None:
        start = bisect.bisect_right([k for k, _ in keyed], order_key(after, order))
    chosen = [dict(r) for _, r in keyed[start : start + limit]]
    more = len(keyed) > start + limit
    counts = Counter((row.get("label") or "") for row in hits)
    return Page(
        rows=chosen,
        total=len(hits),
        label_counts=dict(counts),
        last_key=_key(chosen[-1], order) if more and chosen else None,
    )


def _key(row: Mapping[str, Any], order: Sequence[tuple[str, bool]]) -> tuple[Any, ...]:
    return tuple(row.get(col) for col, _ in order)


def project(row: Mapping[str, Any], cols: Sequence[str] | None) -> dict[str, Any]:
    """`select_cols`: only those columns (unknown ones as null)."""
    if cols is None:
        return dict(row)
    return {col: row.get(col) for col in cols}
