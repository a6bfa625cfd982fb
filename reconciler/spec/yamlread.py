"""YAML to plain data, keeping where every value came from.

PyYAML's loaders forget positions and silently keep the last of two equal keys. Specs are edited by
people, so every later message must point at a line, and a duplicated key is a mistake to report,
not to paper over. We therefore compose the node tree ourselves and build plain JSON-like data
(dicts, lists, scalars) beside a table of positions keyed by JSON path.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from reconciler.model.diagnostics import Diagnostics, Location

JsonPath = tuple[str | int, ...]

# A document this large is a mistake or an alias bomb; either way we stop building it.
MAX_NODES = 100_000


def format_path(path: JsonPath) -> str:
    """`spec.node_types.gpu.min_workers`, with `[i]` for list items."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "").replace("-", "").isalnum():
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


@dataclass
class Positions:
    """Where each value (and each mapping key) of one document stands in its file."""

    file: str
    values: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)
    keys: dict[JsonPath, tuple[int, int]] = field(default_factory=dict)
    document_line: int = 1
    # Values that could not be read at all; they are already reported, so later checks skip them.
    broken: set[JsonPath] = field(default_factory=set)

    def is_broken(self, path: JsonPath) -> bool:
        return any(path[: len(b)] == b for b in self.broken)

    def at(self, path: JsonPath, *, prefer_key: bool = False) -> Location:
        """The location of `path`, or of its nearest ancestor that has one."""
        probe = path
        while True:
            table = (self.keys, self.values) if prefer_key else (self.values, self.keys)
            for positions in table:
                if probe in positions:
                    line, column = positions[probe]
                    return Location(self.file, line, column, format_path(path))
            if not probe:
                return Location(self.file, self.document_line, 1, format_path(path))
            probe = probe[:-1]


@dataclass
class Document:
    """One YAML document: its data (None when the document was empty) and positions."""

    data: Any
    positions: Positions
    ok: bool


def read_documents(text: str, file: str, diags: Diagnostics) -> list[Document]:
    """Every document of a YAML stream; problems go to `diags`, never raised."""
    documents: list[Document] = []
    try:
        for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
            documents.append(_build_document(node, file, diags))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        diags.error(f"YAML syntax error: {problem}", Location(file, line, column))
    return documents


def _build_document(node: Node | None, file: str, diags: Diagnostics) -> Document:
    positions = Positions(file)
    if node is None:
        return Document(None, positions, ok=True)
    positions.document_line = node.start_mark.line + 1
    builder = _Builder(positions, diags)
    data = builder.build(node, ())
    return Document(data, positions, ok=builder.ok)


class _Builder:
    """Walks a composed node tree once, building data and recording positions."""

    def __init__(self, positions: Positions, diags: Diagnostics) -> None:
        self.positions = positions
        self.diags = diags
        self.constructor = SafeConstructor()
        self.visited = 0
        self.stack: set[int] = set()
        self.ok = True

    def fail(self, summary: str, node: Node, path: JsonPath, *, at_key: bool = False) -> None:
        self.ok = False
        self.positions.broken.add(path)
        mark = node.start_mark
        line, column = mark.line + 1, mark.column + 1
        if at_key and path in self.positions.keys:
            line, column = self.positions.keys[path]
        self.diags.error(summary, Location(self.positions.file, line, column, format_path(path)))

    def build(self, node: Node, path: JsonPath) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            if self.visited == MAX_NODES + 1:
                self.fail(f"document too large (more than {MAX_NODES} values)", node, path)
            return None
        self.positions.values.setdefault(
            path, (node.start_mark.line + 1, node.start_mark.column + 1)
        )
        if id(node) in self.stack:
            # An alias shares its node with the anchor; the key says where it was written.
            self.fail("recursive YAML alias", node, path, at_key=True)
            return None
        self.stack.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self.mapping(node, path)
            if isinstance(node, SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
            return self.scalar(node, path)
        finally:
            self.stack.discard(id(node))

    def mapping(self, node: MappingNode, path: JsonPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.key(key_node, path)
            if key is None:
                continue
            child = (*path, key)
            if key in out:
                first = self.positions.keys.get(child, (0, 0))[0]
                self.fail(f"duplicate key {key!r} (first at line {first})", key_node, child)
                continue
            mark = key_node.start_mark
            self.positions.keys[child] = (mark.line + 1, mark.column + 1)
            out[key] = self.build(value_node, child)
        return out

    def key(self, node: Node, path: JsonPath) -> str | None:
        if not isinstance(node, ScalarNode):
            self.fail("mapping keys must be plain strings", node, path)
            return None
        value = self.scalar(node, path)
        if not isinstance(value, str):
            self.fail(f"mapping key {node.value!r} must be a string (quote it)", node, path)
            return None
        return value

    def scalar(self, node: Node, path: JsonPath) -> Any:
        if not isinstance(node, ScalarNode):
            self.fail("unexpected YAML node", node, path)
            return None
        try:
            value = self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            self.fail(f"cannot read value {node.value!r}: {exc}", node, path)
            return None
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(f"{node.value!r} is not a finite number", node, path)
            return None
        if not isinstance(value, str | int | float | bool) and value is not None:
            self.fail(f"{node.value!r} is a {type(value).__name__}; quote it if text", node, path)
            return None
        return value


def walk_paths(data: Any, path: JsonPath = ()) -> Iterator[JsonPath]:
    """Every path in a plain data tree (used by tests to check positions are complete)."""
    yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from walk_paths(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from walk_paths(value, (*path, i))
