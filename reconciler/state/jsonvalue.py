"""Plain JSON values, checked before they are written, and their canonical text.

The state and the ledger accept caller data only as JSON can carry it faithfully. `json.dumps` alone
is too lenient for a file that is compared and diffed: it turns a key `1` into `"1"` and writes
`NaN`, which is not JSON. Checking first also means a bad value fails before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


class _NotPlain(Exception):
    """Raised by the fast walk; the slow one then says where."""


_SCALARS = frozenset({str, int, bool, type(None)})


def plain_json(value: Any, where: str) -> Any:
    """A plain copy of `value` as JSON will write it, or `ValueError` naming the offending path.

    `where` names the value in the message (`records`, `data`); nested paths are appended. The
    walk that builds no paths runs first (a saved state is millions of values); only a value
    that is not plain is walked again to name where it is.
    """
    try:
        return _plain(value)
    except _NotPlain:
        return _explained(value, where)


def _plain(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain
            copy[key] = _plain(item)
        return copy
    if kind is list or kind is tuple:
        return [_plain(item) for item in value]
    if kind in _SCALARS or (kind is float and math.isfinite(value)):
        return value
    if isinstance(value, Mapping | list | tuple):
        return _plain(dict(value) if isinstance(value, Mapping) else list(value))
    if isinstance(value, str | int | bool) or (isinstance(value, float) and math.isfinite(value)):
        return value  # a subclass (a StrEnum's member): JSON writes its value
    raise _NotPlain  # a non-finite float or no JSON value: the careful walk says where


def _explained(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: key {key!r} is not a string")
            copy[key] = _explained(item, f"{where}.{key}")
        return copy
    if isinstance(value, list | tuple):
        return [_explained(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a finite number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"{where}: {type(value).__name__} is not a JSON value")


def canonical(value: Any) -> str:
    """Canonical JSON of a plain value: equal content gives equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
