"""`ray-vast state list`: one line per instance record, or the same rows as JSON.

The rows are read from the records as last saved (no lock, vast not called); `build` gives the
JSON document and `human` the lines, so the command only reads and writes.
"""

from __future__ import annotations

from typing import Any

from reconciler.model.records import Records


def build(records: Records, lineage: str | None, serial: int) -> dict[str, Any]:
    """The state's lineage and serial, and each instance record's id, cluster, vast id and
    phase, by record id."""
    rows = [
        {"id": r.id, "cluster": r.cluster, "vast_id": r.vast_id, "phase": r.phase.value}
        for r in sorted(records.instances.values(), key=lambda r: r.id)
    ]
    return {"lineage": lineage, "serial": serial, "instances": rows}


def human(view: dict[str, Any]) -> str:
    lines = [f"lineage {view['lineage']} serial {view['serial']}"]
    lines += [
        f"instance.{row['id']}  {row['cluster']}  vast {row['vast_id']}  {row['phase']}"
        for row in view["instances"]
    ]
    return "\n".join(lines) + "\n"
