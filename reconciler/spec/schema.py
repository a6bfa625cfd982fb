"""The cluster JSON Schema: the one home of every default and floor.

Editors read the schema for help text, the loader validates against it, fills defaults from it, and
takes the floors (`x-floor`) from it. Keeping the numbers only here means a default cannot drift
between the documentation, the validator and the code.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from reconciler.spec.yamlread import JsonPath

Schema = dict[str, Any]


@functools.cache
def cluster_schema() -> Schema:
    """The schema shipped inside the package (`schemas/cluster.schema.json` links to it)."""
    text = resources.files("reconciler").joinpath("schemas/cluster.schema.json").read_text()
    schema: Schema = json.loads(text)
    return schema


@functools.cache
def cluster_validator() -> Draft202012Validator:
    return Draft202012Validator(cluster_schema())


def resolve(schema: Schema, root: Schema) -> Schema:
    """Follow a local `$ref`, keeping sibling keywords such as `default` and `description`."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target[part]
    merged = dict(target)
    merged.update({k: v for k, v in schema.items() if k != "$ref"})
    return merged


def child_schema(schema: Schema, key: str, root: Schema) -> Schema | None:
    """The schema of property `key` of an object schema, if the schema says one."""
    props = schema.get("properties", {})
    if key in props:
        return resolve(props[key], root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return resolve(extra, root)
    return None


def fill_defaults(instance: Any, schema: Schema, root: Schema | None = None) -> Any:
    """A copy of a schema-valid `instance` with every absent property given its default."""
    root = root or schema
    schema = resolve(schema, root)
    if not isinstance(instance, dict):
        return copy.deepcopy(instance)
    out = {key: copy.deepcopy(value) for key, value in instance.items()}
    for key, prop in schema.get("properties", {}).items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
    for key, value in out.items():
        sub = child_schema(schema, key, root)
        if sub is not None and isinstance(value, dict):
            out[key] = fill_defaults(value, sub, root)
    return out


def property_names(schema: Schema, path: JsonPath, root: Schema | None = None) -> list[str]:
    """The property names the schema allows at `path` (for "did you mean")."""
    root = root or schema
    here: Schema | None = resolve(schema, root)
    for part in path:
        if here is None or isinstance(part, int):
            return []
        here = child_schema(here, part, root)
    if here is None:
        return []
    names = list(here.get("properties", {}))
    enum = here.get("propertyNames", {}).get("enum")
    return names + list(enum or [])


def floors(schema: Schema | None = None) -> Iterator[tuple[JsonPath, int | float]]:
    """Every `x-floor` in the schema, as (path pattern, floor); `*` stands for any map key."""
    root = schema or cluster_schema()
    yield from _floors(root, (), root)


def _floors(schema: Schema, path: JsonPath, root: Schema) -> Iterator[tuple[JsonPath, int | float]]:
    schema = resolve(schema, root)
    if "x-floor" in schema:
        yield path, schema["x-floor"]
    for key, prop in schema.get("properties", {}).items():
        yield from _floors(prop, (*path, key), root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and "$ref" in extra:
        yield from _floors(extra, (*path, "*"), root)
