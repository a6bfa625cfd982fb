"""Validation of protocol messages against the agent-*.v1.json schemas (the head/agent contract)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from reconciler.head import messages


def assert_valid(name: str, doc: Any, part: str | None = None) -> None:
    schema = messages.schema(name)
    if part is not None:
        schema = {"$defs": schema["$defs"], "$ref": f"#/$defs/{part}"}
    errors = [
        f"{list(e.absolute_path)}: {e.message}"
        for e in Draft202012Validator(schema).iter_errors(doc)
    ]
    assert not errors, f"{name}{'#' + part if part else ''}: {errors}"
