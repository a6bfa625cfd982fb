"""`ray-vast ledger`: the story of every machine, one line per event."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from reconciler.errors import InputError
from reconciler.state.ledger import LedgerEntry

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """`30m`, `2h`, `1d` ago; an ISO date-time (UTC if no zone); or epoch seconds."""
    match = DURATION.match(text.strip())
    if match:
        return now - float(match[1]) * UNITS[match[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InputError(
            f"--since {text!r}: use 30m, 2h, 1d, an ISO time or epoch seconds"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def human_line(entry: LedgerEntry) -> str:
    when = datetime.fromtimestamp(entry.time, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    who = entry.record or "-"
    if entry.instance is not None:
        who += f" (vast {entry.instance})"
    money = f"  {entry.dph:+.3f}$/h" if entry.dph else ""
    kind = f"{entry.kind.value:<9} {entry.class_:<22}"
    return f"{when}  {entry.cluster}  {kind} {who}{money}  {entry.message}"


def human(entries: Iterable[LedgerEntry]) -> str:
    lines = [human_line(e) for e in entries]
    return "\n".join(lines) + ("\n" if lines else "No ledger entries match.\n")
