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
    """The file's bytes: the envelope in a fixed order, records sorted, two-space indent (for the
    people who read and diff a state file). `indent=None`: the same JSON on one line, for a store
    nobody reads (the memory store): Python's JSON writer is C only without an indent, and the
    indented one was a fifth of the fast lane's time."""
    envelope = snapshot.to_json()
    envelope["records"] = json.loads(canonical(snapshot.records))  # sorted keys, checked values
    if indent is None:
        return (json.dumps(envelope, separators=(",", ":"), allow_nan=False) + "\n").encode()
    return (json.dumps(envelope, indent=indent, allow_nan=False) + "\n").encode()


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
