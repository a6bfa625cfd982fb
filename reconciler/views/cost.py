"""`ray-vast cost`: what the machines cost between two times, at vast's prices, and why.

The accounting is `reconciler.model.cost` (pure): each instance's bill from its record (or,
once the record has left the state, from the ledger), per second, split by cause. This module
builds the view from it and renders it: a table like `status`, or `--json`.

`--json` is versioned: `format_version` is MAJOR.MINOR; a minor version only adds fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from reconciler.model import cost
from reconciler.model.cost import CAUSES, Cause, Life
from reconciler.model.records import Records

FORMAT_VERSION = "1.0"
H = 3600.0

# Column headings of the causes, in the order of a machine's life.
HEADINGS: Mapping[Cause, str] = {
    Cause.SERVING: "serving",
    Cause.IDLE: "idle",
    Cause.BOOTING: "booting",
    Cause.FAILED: "failed",
    Cause.EXTRA: "extra",
    Cause.ORPHAN: "orphan",
    Cause.STOPPED: "stopped",
}
MEANINGS: Mapping[Cause, str] = {
    Cause.SERVING: "workers serving",
    Cause.IDLE: "workers quiet but kept (the idle timers armed)",
    Cause.BOOTING: "rented, not serving yet",
    Cause.FAILED: "ended without ever serving",
    Cause.EXTRA: "extra candidates (others filled the slots)",
    Cause.ORPHAN: "labelled ours with no record, until the sweep ended them",
    Cause.STOPPED: "storage while stopped (disk kept)",
}


def lives(
    records: Records, bills: Mapping[str, Life], clusters: Iterable[str] | None = None
) -> list[Life]:
    """Every bill we know: the state's records, and the ledger's for what the state forgot (a
    record in the state wins over its ledger copy). `clusters`: only these."""
    found = dict(bills)
    for record in records.instances.values():
        life = cost.life_of(record)
        if life is not None:
            found[life.instance] = life
    wanted = set(clusters) if clusters is not None else None
    return [life for _, life in sorted(found.items()) if wanted is None or life.cluster in wanted]


def build(known: Iterable[Life], *, since: float | None, until: float, by: str) -> dict[str, Any]:
    """The view: dollars in the window, in total, by cause, and by `by` (cluster, node-type,
    cause or instance), each group with its dollars by cause."""
    known = list(known)
    found = cost.charges(known, since=since, until=until)
    groups = cost.group(found, by)
    causes = cost.group(found, "cause")
    billed = {c.instance for c in found}
    starts = [life.start if since is None else max(since, life.start) for life in known]
    first = min(
        (t for t, life in zip(starts, known, strict=True) if life.instance in billed), default=None
    )
    return {
        "format_version": FORMAT_VERSION,
        "currency": "USD",
        "since": since,
        "until": until,
        "first_bill": first,
        "by": by,
        "dollars": round(sum(t.dollars for t in groups.values()), 6),
        "instance_hours": round(sum(t.seconds for t in groups.values()) / H, 4),
        "by_cause": {
            c.value: round(causes[c.value].dollars, 6) if c.value in causes else 0.0 for c in CAUSES
        },
        "groups": [
            {
                "key": key,
                "dollars": round(totals.dollars, 6),
                "instance_hours": round(totals.seconds / H, 4),
                "by_cause": {c.value: round(v, 6) for c, v in totals.by_cause.items()},
            }
            for key, totals in groups.items()
        ],
    }


def human(view: Mapping[str, Any]) -> str:
    since, until = view["since"], view["until"]
    start = since if since is not None else view["first_bill"]
    window = f"{_when(start)} to {_when(until)}" if start is not None else f"to {_when(until)}"
    lines = [f"Cost {window}, by {view['by']} (vast's prices, per second)"]
    if not view["groups"]:
        lines.append("  nothing billed in this window")
        return "\n".join(lines) + "\n"
    by_cause = view["by"] == "cause"
    width = max(12, *(len(g["key"]) for g in view["groups"]))
    if by_cause:
        lines.append(f"  {'cause':<{width}} {'dollars':>10} {'hours':>9} {'share':>6}  what it is")
        total = view["dollars"] or 1.0
        for group in view["groups"]:
            cause = Cause(group["key"])
            lines.append(
                f"  {group['key']:<{width}} {group['dollars']:>10.2f} "
                f"{group['instance_hours']:>9.1f} {100 * group['dollars'] / total:>5.1f}%  "
                f"{MEANINGS[cause]}"
            )
    else:
        shown = [c for c in CAUSES if view["by_cause"][c.value] > 0] or [Cause.SERVING]
        head = "".join(f" {HEADINGS[c]:>9}" for c in shown)
        lines.append(f"  {view['by']:<{width}} {'dollars':>10} {'hours':>9}{head}")
        for group in view["groups"]:
            cells = "".join(f" {group['by_cause'].get(c.value, 0.0):>9.2f}" for c in shown)
            lines.append(
                f"  {group['key']:<{width}} {group['dollars']:>10.2f} "
                f"{group['instance_hours']:>9.1f}{cells}"
            )
        cells = "".join(f" {view['by_cause'][c.value]:>9.2f}" for c in shown)
        lines.append(
            f"  {'total':<{width}} {view['dollars']:>10.2f} {view['instance_hours']:>9.1f}{cells}"
        )
    lines.append(f"Total: ${view['dollars']:.2f} over {view['instance_hours']:.1f} instance-hours")
    return "\n".join(lines) + "\n"


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
