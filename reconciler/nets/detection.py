"""What a net reports: one machine, one class, and the facts behind it.

A net never calls anything and never decides what follows; it names a class, and the routing
table (`model.routing`) and the planner turn that into actions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Detection:
    record: str
    cls: str
    detail: str
    vast_id: int | None = None
