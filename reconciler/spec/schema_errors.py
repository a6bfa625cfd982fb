"""Turn JSON Schema validation errors into diagnostics a person can act on.

jsonschema's messages are written for schema authors ("Additional properties are not allowed
('nmae' was unexpected)"). Users want the key, where it is, and what they probably meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

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
    for error in _leaves(errors):
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
    elif error.validator == "required":
        missing = _missing(error)
        diags.error(f"missing required field {missing!r}", positions.at(path, prefer_key=True))
    else:
        diags.error(_message(error), positions.at(path))


def _unknown_keys(
    error: ValidationError, path: JsonPath, positions: Positions, diags: Diagnostics
) -> None:
    allowed = set(error.schema.get("properties", {}))
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
    key = error.instance
    location = positions.at((*path, key), prefer_key=True)
    if error.validator == "pattern":
        diags.error(
            f"name {key!r} is not allowed: use lowercase letters, digits and hyphens", location
        )
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


def _missing(error: ValidationError) -> str:
    required = error.validator_value
    instance = error.instance if isinstance(error.instance, dict) else {}
    missing = [name for name in required if name not in instance]
    return missing[0] if missing else str(required)


def _message(error: ValidationError) -> str:
    field = format_path(tuple(error.absolute_path)) or "document"
    value = _short(error.instance)
    kind = error.validator
    expected = error.validator_value
    if kind == "type":
        return f"{field} must be {_type_words(expected)}, not {value}"
    if kind == "const":
        return f"{field} must be {expected!r}, not {value}"
    if kind == "enum":
        return f"{field} must be one of {', '.join(map(repr, expected))}, not {value}"
    if kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {
            "minimum": "at least",
            "exclusiveMinimum": "greater than",
            "maximum": "at most",
            "exclusiveMaximum": "less than",
        }[str(kind)]
        return f"{field} must be {word} {expected}, not {value}"
    if kind == "pattern":
        return f"{field} {value} does not have the expected form ({expected})"
    return f"{field}: {error.message[:200]}"


def _type_words(expected: Any) -> str:
    names = expected if isinstance(expected, list) else [expected]
    words = {"integer": "a whole number", "number": "a number", "object": "a mapping"}
    return " or ".join(words.get(n, f"a {n}") for n in names)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."
