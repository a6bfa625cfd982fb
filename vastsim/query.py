"""The query engine: vast's `{field: {op: value}}` filters for offers and for instance listings.

Clients disagree on types (the official CLI sends most numbers as strings, `"RTX 4090"` may come
as `RTX_4090`, `external` is null on real offers yet matches `external eq false`), so the engine
is lenient where the reference shows vast is, and strict (400) where vast is strict: unknown
operators, and filters on instance columns that the listing cannot search.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

OPERATORS = frozenset({"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"})
OPERATOR_SPELLINGS = {
    "=": "eq",
    "==": "eq",
    "!=": "neq",
    "noteq": "neq",
    "not eq": "neq",
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "nin": "notin",
    "not in": "notin",
}
OFFER_ALIASES = {
    "cuda_vers": "cuda_max_good",
    "display_active": "gpu_display_active",
    "dlperf_usd": "dlperf_per_dphtotal",
    "dph": "dph_total",
    "flops_usd": "flops_per_dphtotal",
}
OFFER_KINDS = {
    "on-demand": "on-demand",
    "ondemand": "on-demand",
    "bid": "bid",
    "interruptible": "bid",
    "reserved": "reserved",
}
DEFAULT_ORDER = (("score", True),)
DEFAULT_ALLOCATED_STORAGE = 8.0

INSTANCE_FILTER_KEYS = frozenset(
    {
        "id",
        "actual_status",
        "intended_status",
        "cur_state",
        "next_state",
        "label",
        "gpu_name",
        "verification",
        "machine_id",
        "host_id",
        "image_uuid",
        "status_msg",
        "start_date",
        "geolocation",
        "is_bid",
        "template_id",
    }
)


class QueryError(ValueError):
    """A query vast would refuse: carries the error code and message of the 400 answer."""

    def __init__(self, error: str, msg: str) -> None:
        super().__init__(msg)
        self.error = error
        self.msg = msg


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: Any


@dataclass(frozen=True)
class OfferQuery:
    conditions: tuple[Condition, ...]
    order: tuple[tuple[str, bool], ...]  # (field, descending)
    limit: int | None
    kind: str
    allocated_storage: float


# -- parsing ------------------------------------------------------------------------------------


def parse_offer_query(body: Mapping[str, Any]) -> OfferQuery:
    """Split a search body into filters and controls; unknown control keys are ignored."""
    conditions: list[Condition] = []
    for key, value in body.items():
        if key in ("order", "type", "limit", "allocated_storage") or not isinstance(value, dict):
            continue
        conditions.extend(parse_conditions(OFFER_ALIASES.get(key, key), value))
    kind_text = str(body.get("type") or "on-demand")
    kind = OFFER_KINDS.get(kind_text)
    if kind is None:
        raise QueryError("invalid_args", f"Invalid type: {kind_text}")
    return OfferQuery(
        conditions=tuple(conditions),
        order=parse_order(body.get("order")),
        limit=parse_limit(body.get("limit")),
        kind=kind,
        allocated_storage=parse_storage(body.get("allocated_storage")),
    )


def parse_conditions(field: str, ops: Mapping[str, Any]) -> list[Condition]:
    out = []
    for op_text, value in ops.items():
        op = OPERATOR_SPELLINGS.get(op_text, op_text)
        if op not in OPERATORS:
            raise QueryError("invalid_args", f"Unknown operator {op_text!r} for {field}")
        out.append(Condition(field, op, value))
    return out


def parse_order(order: Any) -> tuple[tuple[str, bool], ...]:
    if not order:
        return DEFAULT_ORDER
    if not isinstance(order, list):
        raise QueryError("invalid_args", "order must be a list of [field, direction] pairs")
    out = []
    for item in order:
        if isinstance(item, list | tuple) and item:
            field = OFFER_ALIASES.get(str(item[0]), str(item[0]))
            descending = len(item) > 1 and str(item[1]).lower() == "desc"
            out.append((field, descending))
        elif isinstance(item, str):
            out.append((OFFER_ALIASES.get(item, item), False))
    return tuple(out) or DEFAULT_ORDER


def parse_limit(limit: Any) -> int | None:
    if limit is None or limit == "":
        return None
    try:
        return max(0, int(float(limit)))
    except (TypeError, ValueError):
        raise QueryError("invalid_args", f"Invalid limit: {limit!r}") from None


def parse_storage(value: Any) -> float:
    if value is None or value == "":
        return DEFAULT_ALLOCATED_STORAGE
    try:
        return float(value)
    except (TypeError, ValueError):
        raise QueryError("invalid_args", f"Invalid allocated_storage: {value!r}") from None


def parse_instance_filters(filters: Mapping[str, Any]) -> list[Condition]:
    """`select_filters` of the v1 listing: only real, stored columns can be searched."""
    out: list[Condition] = []
    for key, value in filters.items():
        if key not in INSTANCE_FILTER_KEYS:
            raise QueryError(
                "invalid_request", f"Error in query parameters: {key} is not a valid search key"
            )
        if isinstance(value, dict):
            out.extend(parse_conditions(key, value))
        else:
            out.append(Condition(key, "eq", value))
    return out


# -- evaluation ---------------------------------------------------------------------------------

_MISSING = object()


def offer_value(row: Mapping[str, Any], field: str) -> Any:
    """A row's value for a filter field, with vast's derived fields."""
    if field == "verified":
        return row.get("verification") == "verified"
    if field == "datacenter":
        return row.get("hosting_type") == 1
    if field == "external":
        return bool(row.get("external"))
    return row.get(field, _MISSING)


def matches(row: Mapping[str, Any], conditions: Iterable[Condition]) -> bool:
    """True when the row meets every condition; conditions on unknown fields are ignored."""
    for cond in conditions:
        actual = offer_value(row, cond.field)
        if actual is _MISSING:
            continue
        if cond.field == "driver_version" and _number(cond.value) is not None:
            actual = row.get("driver_vers", actual)
        if not compare(actual, cond.op, cond.value, cond.field):
            return False
    return True


def compare(actual: Any, op: str, expected: Any, field: str = "") -> bool:
    if op in ("in", "notin"):
        items = expected if isinstance(expected, list | tuple) else [expected]
        hit = any(equal(actual, item, field) for item in items)
        return hit if op == "in" else not hit
    if op == "eq":
        return equal(actual, expected, field)
    if op == "neq":
        return not equal(actual, expected, field)
    return ordered(actual, op, expected)


def equal(actual: Any, expected: Any, field: str = "") -> bool:
    if field == "gpu_name" and isinstance(actual, str) and isinstance(expected, str):
        return _name(actual) == _name(expected)
    if field == "geolocation" and isinstance(actual, str) and isinstance(expected, str):
        return _same_place(actual, expected)
    if actual is None or expected is None:
        return actual is None and expected in (None, "null", "None")
    if isinstance(actual, bool):
        flag = _bool(expected)
        return flag is not None and flag == actual
    if isinstance(actual, int | float):
        number = _number(expected)
        return number is not None and float(actual) == number
    return str(actual) == str(expected)


def ordered(actual: Any, op: str, expected: Any) -> bool:
    a, e = _number(actual), _number(expected)
    if a is None or e is None:
        if isinstance(actual, str) and isinstance(expected, str):
            return _cmp(op, actual, expected)
        return False
    return _cmp(op, a, e)


def _cmp(op: str, a: Any, b: Any) -> bool:
    if op == "gt":
        return bool(a > b)
    if op == "gte":
        return bool(a >= b)
    if op == "lt":
        return bool(a < b)
    return bool(a <= b)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
    return None


def _name(text: str) -> str:
    return " ".join(text.replace("_", " ").split()).casefold()


def _same_place(actual: str, expected: str) -> bool:
    """`geolocation in [US, CA]` matches on the trailing two-letter country code."""
    wanted = expected.strip()
    if len(wanted) == 2:
        return actual.strip()[-2:].upper() == wanted.upper()
    return _name(actual) == _name(wanted)


def sort_rows(
    rows: Sequence[Mapping[str, Any]], order: Sequence[tuple[str, bool]]
) -> list[Mapping[str, Any]]:
    """Stable multi-key sort; nulls last ascending and first descending, as Postgres does."""
    out = list(rows)
    for field, descending in reversed(order):

        def key(row: Mapping[str, Any], f: str = field) -> tuple[int, int, float, str]:
            return sort_key(row.get(f))

        out.sort(key=key, reverse=descending)
    return out


def sort_key(value: Any) -> tuple[int, int, float, str]:
    if value is None:
        return (1, 0, 0.0, "")
    if isinstance(value, bool | int | float):
        return (0, 0, float(value), "")
    return (0, 1, 0.0, str(value))


def search_offers(rows: Iterable[Mapping[str, Any]], query: OfferQuery) -> list[Mapping[str, Any]]:
    """Filter, then order, then limit."""
    hits = [row for row in rows if matches(row, query.conditions)]
    ordered_rows = sort_rows(hits, query.order)
    return ordered_rows if query.limit is None else ordered_rows[: query.limit]
