"""Turn JSON Schema validation errors into diagnostics a person can act on.

jsonschema's messages are written for schema authors ("Additional properties are not allowed
('nmae' was unexpected)"). Users want the key, where it is, and what they probably meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, cast

from jsonschema import ValidationError

from reconciler.model.diagnostics import Diagnostics
from reconciler.spec.schema import cluster_schema, cluster_validator, property_names
from reconciler.spec.yamlread import JsonPath, Positions, format_path

MAX_VALUE_CHARS = 60

# Keys people reach for that ray-vast deliberately does not offer, with the reason.
NOT_OFFERED = {
    "order": "the order is fixed: cheapest dph_total first",
    "sort": "the order is fixed: cheapest dph_total first",
    "api_key": "the vast API key is read from the environment (VAST_API_KEY), never from a file",
    "vast_api_key": "the vast API key is read from the environment (VAST_API_KEY)",
}


def report(data: Any, positions: Positions, diags: Diagnostics) -> None:
    """Validate one document against the cluster schema, appending every problem."""
    if not isinstance(data, dict):
        diags.error("a cluster document must be a mapping", positions.at(()))
        return
    errors = sorted(cluster_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    missing_seen: set[tuple[JsonPath, str]] = set()
    for error in _leaves(errors):
        if positions.is_broken(tuple(error.absolute_path)):
            continue
        if error.validator == "required":
            _missing(error, positions, diags, missing_seen)
        else:
            _report_one(error, positions, diags)


def _leaves(errors: Iterable[ValidationError]) -> Iterable[ValidationError]:
    """Errors with sub-errors (anyOf and friends) are reported through their most specific one."""
    for error in errors:
        if error.context:
            yield from _leaves(error.context)
        else:
            yield error


def _report_one(error: ValidationError, positions: Positions, diags: Diagnostics) -> None:
    path: JsonPath = tuple(error.absolute_path)
    if error.validator == "additionalProperties":
        _unknown_keys(error, path, positions, diags)
    elif "propertyNames" in error.relative_schema_path:
        _bad_key(error, path, positions, diags)
    else:
        diags.error(_message(error), positions.at(path))


def _unknown_keys(
    error: ValidationError, path: JsonPath, positions: Positions, diags: Diagnostics
) -> None:
    schema = error.schema if isinstance(error.schema, dict) else {}
    allowed = set(schema.get("properties", {}))
    instance = error.instance if isinstance(error.instance, dict) else {}
    for key in instance:
        if key in allowed:
            continue
        diags.error(
            f"unknown field {key!r}{_hint(key, sorted(allowed))}",
            positions.at((*path, key), prefer_key=True),
        )


def _bad_key(
    error: ValidationError, path: JsonPath, positions: Positions, diags: Diagnostics
) -> None:
    key = str(error.instance)
    location = positions.at((*path, key), prefer_key=True)
    if error.validator == "pattern":
        if path and path[-1] == "node_types":
            rule = "use lowercase letters, digits and hyphens"
        else:
            rule = f"keys here must match {_expected(error)}"
        diags.error(f"key {key!r} is not allowed: {rule}", location)
        return
    names = property_names(cluster_schema(), path)
    diags.error(f"unknown offer field {key!r}{_hint(str(key), names)}", location)


def _hint(key: str, candidates: list[str]) -> str:
    if key in NOT_OFFERED:
        return f": {NOT_OFFERED[key]}"
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    if 0 < len(candidates) <= 10:
        return f"; expected one of: {', '.join(candidates)}"
    return ""


def _missing(
    error: ValidationError,
    positions: Positions,
    diags: Diagnostics,
    seen: set[tuple[JsonPath, str]],
) -> None:
    """jsonschema repeats a `required` error per missing name; report each name once."""
    path: JsonPath = tuple(error.absolute_path)
    instance = error.instance if isinstance(error.instance, dict) else {}
    for name in _expected(error):
        if name in instance or (path, name) in seen:
            continue
        seen.add((path, name))
        diags.error(f"missing required field {name!r}", positions.at(path, prefer_key=True))


BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _message(error: ValidationError) -> str:
    field = format_path(tuple(error.absolute_path)) or "document"
    value = _short(error.instance)
    kind = str(error.validator)
    expected = _expected(error)
    if kind in ("minProperties", "minLength", "minItems") and expected == 1:
        return f"{field} must not be empty"
    wanted = {
        "type": lambda: _type_words(expected),
        "const": lambda: repr(expected),
        "enum": lambda: "one of " + ", ".join(map(repr, expected)),
    }
    if kind in wanted:
        return f"{field} must be {wanted[kind]()}, not {value}"
    if kind in BOUND_WORDS:
        return f"{field} must be {BOUND_WORDS[kind]} {expected}, not {value}"
    if kind == "pattern":
        return f"{field} {value} does not have the expected form ({expected})"
    return f"{field}: {error.message[:200]}"


def _expected(error: ValidationError) -> Any:
    """The keyword's value in the schema (the stubs allow "unset"; a real error always has it)."""
    return cast(Any, error.validator_value)


def _type_words(expected: Any) -> str:
    names = expected if isinstance(expected, list) else [expected]
    words = {"integer": "a whole number", "number": "a number", "object": "a mapping"}
    return " or ".join(words.get(n, f"a {n}") for n in names)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."
