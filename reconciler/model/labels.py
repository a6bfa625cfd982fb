"""The ownership mark on every instance we rent: its vast label, and how to read one back.

The label is how an instance is found again when nothing else is known of it: a create whose
answer was lost is adopted by it, the orphan sweep and `down` find ours by it (whoever's state
made them), and it names the record it belongs to. It is a plain string on the provider's side,
so writing and reading it live together here, apart from the records that carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

LABEL_PREFIX = "rv"


def label_for(cluster: str, lineage: str, record_id: str) -> str:
    """The ownership mark every instance we create carries: `rv.<cluster>.<lineage8>.<id>`."""
    return f"{LABEL_PREFIX}.{cluster}.{lineage[:8]}.{record_id}"


@dataclass(frozen=True)
class LabelInfo:
    cluster: str
    lineage8: str
    record_id: str


def parse_label(label: str | None) -> LabelInfo | None:
    """The parts of a ray-vast label, or None for anything that is not one."""
    if not label:
        return None
    parts = label.split(".")
    if len(parts) != 4 or parts[0] != LABEL_PREFIX or not all(parts[1:]):
        return None
    return LabelInfo(parts[1], parts[2], parts[3])
