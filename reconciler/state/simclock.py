"""The clock of a state `ray-vast simulate` made (issue 25: `cost` on a simulated run).

A simulated day runs on virtual time: its records and ledger carry the run's own clock, which may
be long ago or far ahead of the wall clock. `simulate --state-dir` writes the run's span here, and
`cost` (with no `--until`) prices up to the run's end, not up to today: priced to today, the
simulation's last workers billed for months ($224.61 for a run whose meter said $0.79).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

FILE = "simulated-clock.json"


@dataclass(frozen=True)
class SimulatedClock:
    start: float
    end: float


def write(state_dir: Path, clock: SimulatedClock) -> None:
    path = state_dir / FILE
    path.write_text(json.dumps({"simulated": True, "start": clock.start, "end": clock.end}) + "\n")
    path.chmod(0o600)


def read(state_dir: Path) -> SimulatedClock | None:
    """The run's span, when a simulation made this state (None: a real one, or unreadable)."""
    try:
        doc = json.loads((state_dir / FILE).read_text())
        return SimulatedClock(float(doc["start"]), float(doc["end"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
