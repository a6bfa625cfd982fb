"""What a net reports: one machine, one class, and the facts behind it.

A net never calls anything and never decides what follows; it names a class, and the routing
table (`model.routing`) and the planner turn that into actions. The type lives with the plan, which
carries detections to the ledger.
"""

from __future__ import annotations

from reconciler.model.plan import Detection

__all__ = ["Detection"]
