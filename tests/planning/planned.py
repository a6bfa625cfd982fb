"""The planner for tests that read what a plan leaves: its changes laid on its records.

A plan no longer carries the whole next state (issue 22: `Plan.changes`, model/changes.py). The
tables of planning tests still ask "what would the records be after this plan": `plan` and
`react` here call the real ones and answer a `Planned`, the plan with `records` =
`plan.changes.apply(the records it was made from)`, which is what the executor saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.model.observation import Observation
from reconciler.model.plan import Plan
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets.detection import Detection
from reconciler.planning import plan as planning
from reconciler.planning import react as reacting


@dataclass(frozen=True)
class Planned:
    """A plan and the records its changes make of those it was made from."""

    plan: Plan
    records: Records

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plan, name)


def plan(
    desired: Sequence[ClusterSpec], observation: Observation, records: Records, **kw: Any
) -> Planned:
    made = planning.plan(desired, observation, records, **kw)
    return Planned(made, made.changes.apply(records))


def react(records: Records, detections: Sequence[Detection], specs: Any, **kw: Any) -> Planned:
    made = reacting.react(records, detections, specs, **kw)
    return Planned(made, made.changes.apply(records))
