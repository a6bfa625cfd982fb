"""One version of the recorded state: the envelope with identity, and the caller's records.

The envelope follows Terraform's state file (conventions.md section 1.5):

- `version`: the file format, upgraded on read by `versions`;
- `serial`: bumped by exactly one on each write that changes the records, so two snapshots of one
  lineage can be ordered and a saved plan made from an older one can be refused as stale;
- `lineage`: a UUID fixed when the state is first written, so two states that merely share a
  serial are never mistaken for one another; the first 8 characters go into every instance label;
- `ray_vast_version`: the version of the tool that wrote it, for the person reading a bug report;
- `records`: a JSON object the caller owns; the store neither reads nor checks its contents.

Both stores keep snapshots as the bytes `encode` makes and read them back through `decode`, so the
memory store exercises exactly the file store's encoding and upgrade path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.state.errors import StateCorruptError
from reconciler.state.jsonvalue import canonical
from reconciler.state.versions import CURRENT_VERSION, Document, upgrade

Records = Mapping[str, Any]


@dataclass(frozen=True)
class StateSnapshot:
    """A state as read from, or just written to, a store.

    Every read returns fresh records: the caller may change them without touching the store.
    """

    lineage: str
    serial: int
    ray_vast_version: str
    records: Records
    version: int = CURRENT_VERSION

    def to_json(self) -> Document:
        return {
            "version": self.version,
            "serial": self.serial,
            "lineage": self.lineage,
            "ray_vast_version": self.ray_vast_version,
            "records": dict(self.records),
        }


def encode(snapshot: StateSnapshot, *, indent: int | None = 2) -> bytes:
    """The file's bytes: the envelope in a fixed order, records sorted, indented down to each
    entry of a table (an instance, a request), and each entry on a line of its own (for the
    people who read and diff a state file: one line per record that changed). `indent=None`: the
    same JSON on one line, for a store nobody reads (the memory store). Python's JSON writer is C
    only without an indent: an indent all the way down was two thirds of a save (a save of 1,000
    workers took 0.3 s, the head's heartbeats waited on it) and a fifth of the fast lane."""
    envelope = snapshot.to_json()
    if indent is None:
        records = envelope.pop("records")
        head = json.dumps(envelope, separators=(",", ":"), allow_nan=False)[:-1]
        return f'{head},"records":{canonical(records)}}}\n'.encode()
    return ("\n".join(_laid_out(envelope, indent, ENTRY_DEPTH, keep_order=True)) + "\n").encode()


# The envelope, `records`, a table, an entry: the depth whose values go on one line each.
ENTRY_DEPTH = 3


def _laid_out(
    value: Any, indent: int, depth: int, prefix: str = "", *, keep_order: bool = False
) -> list[str]:
    """`value` as JSON lines, keys sorted (but the envelope's, `keep_order`): objects indented
    `depth` levels deep, anything deeper on one line (C's writer), so a record is one line."""
    if not isinstance(value, dict) or not value or depth == 0:
        one = json.dumps(value, sort_keys=True, separators=(", ", ": "), allow_nan=False)
        return [prefix + one]
    pad = " " * indent
    lines = [prefix + "{"]
    items = list(value.items()) if keep_order else sorted(value.items())
    for i, (key, item) in enumerate(items):
        inner = _laid_out(item, indent, depth - 1, f"{pad}{json.dumps(key)}: ")
        inner = [inner[0], *(pad + line for line in inner[1:])]
        if i < len(items) - 1:
            inner[-1] += ","
        lines += inner
    return [*lines, "}"]


def _field(doc: Document, name: str, kind: type, source: str) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise StateCorruptError(
            f"{source}: `{name}` must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def decode(data: bytes, source: str) -> StateSnapshot:
    """Parse, upgrade and check a state document. `source` names it in every error."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateCorruptError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateCorruptError(f"{source} is not a JSON object")
    doc = upgrade(doc, source)
    serial = _field(doc, "serial", int, source)
    if serial < 1:
        raise StateCorruptError(f"{source}: `serial` must be at least 1, got {serial}")
    lineage = _field(doc, "lineage", str, source)
    if not lineage:
        raise StateCorruptError(f"{source}: `lineage` is empty")
    records = _field(doc, "records", dict, source)
    return StateSnapshot(
        lineage=lineage,
        serial=serial,
        ray_vast_version=_field(doc, "ray_vast_version", str, source),
        records=records,
        version=doc["version"],
    )
