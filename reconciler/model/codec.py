"""One codec between the model's frozen dataclasses and JSON-ready data.

Records go to the state file and plans to plan files; both are trees of dataclasses, enums,
mappings and tuples. A single codec driven by the type hints serves both, so a field added to a
record is saved and read back without anyone writing a converter for it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar, get_args, get_origin

T = TypeVar("T")


_LEAVES = frozenset({str, int, float, bool, type(None)})


def encode(value: Any) -> Any:
    """Plain JSON data for a model value; mapping keys become strings."""
    kind: Any = type(value)
    if kind in _LEAVES:  # most of a state: decided by one set lookup, before any ABC check
        return value
    names = _field_names(kind)
    if names is not None:
        return {name: encode(getattr(value, name)) for name in names}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value


@functools.cache
def _field_names(kind: Any) -> tuple[str, ...] | None:
    """A dataclass's field names, once per class (None for anything else)."""
    if not dataclasses.is_dataclass(kind):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def decode(cls: type[T], data: Any) -> T:
    """The dataclass `cls` rebuilt from what `encode` produced."""
    result: T = _decode(cls, data)
    return result


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _decode_union(tp, data)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = _hints(tp)
        fields = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _decode(hints[k], v) for k, v in data.items() if k in fields})
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(data)
    if origin in (Mapping, dict) or origin is typing.Mapping:
        key_type, value_type = get_args(tp)
        return {_key(key_type, k): _decode(value_type, v) for k, v in data.items()}
    if origin is tuple:
        args = get_args(tp)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else Any
        return tuple(_decode(item, v) for v in data)
    if tp is float and isinstance(data, int):
        return float(data)
    return data


def _decode_union(tp: Any, data: Any) -> Any:
    options = [a for a in get_args(tp) if a is not type(None)]
    for option in options:
        if dataclasses.is_dataclass(option) or (
            isinstance(option, type) and issubclass(option, Enum)
        ):
            return _decode(option, data)
    if float in options and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if any(get_origin(o) is tuple for o in options) and isinstance(data, list):
        return tuple(data)
    return data


def _key(key_type: Any, key: str) -> Any:
    return int(key) if key_type is int else key
