"""What a plan changes in the records, as changes the executor applies (never a whole next state).

Terraform's rule is that the actions taken during apply are described entirely by the plan's
Changes. A ray-vast plan's bookkeeping (records refreshed from the listing, requests placed, hosts
blocklisted, a breaker tripped, an alert raised, ended records forgotten) is kept the same way:
per keyed table of the records, the entries the plan writes and the keys it removes; the alerts
it raises; the next record id. `apply` lays them onto the records as they are when the plan is
carried out, so a change another thread saved in between (a heartbeat's sample, a pin) survives
where the plan did not touch that entry, and on the records the plan was made from it gives back
exactly what the planner computed (`between(a, b).apply(a) == b`, tested over the planner's
tables).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from reconciler.model.evolve import evolve
from reconciler.model.records import (
    Alert,
    BlockEntry,
    BreakerState,
    ClusterRecord,
    InstanceRecord,
    JoinToken,
    PoolState,
    Records,
)
from reconciler.model.requestrecord import Request

# The keyed tables of `Records`, each with its "<table>_removed" keys below.
TABLES = (
    "instances",
    "requests",
    "blocklist",
    "breakers",
    "pools",
    "clusters",
    "tokens",
    "unrecorded_seen",
)
# The append-only sequences of `Records`: a plan adds to their end.
SEQUENCES = ("revoked_certs", "alerts")


@dataclass(frozen=True)
class Changes:
    """The entries a plan writes and the keys it removes, per table of the records."""

    instances: Mapping[str, InstanceRecord] = field(default_factory=dict)
    instances_removed: tuple[str, ...] = ()
    requests: Mapping[str, Request] = field(default_factory=dict)
    requests_removed: tuple[str, ...] = ()
    blocklist: Mapping[str, Mapping[int, BlockEntry]] = field(default_factory=dict)
    blocklist_removed: tuple[str, ...] = ()
    breakers: Mapping[str, BreakerState] = field(default_factory=dict)
    breakers_removed: tuple[str, ...] = ()
    pools: Mapping[str, PoolState] = field(default_factory=dict)
    pools_removed: tuple[str, ...] = ()
    clusters: Mapping[str, ClusterRecord] = field(default_factory=dict)
    clusters_removed: tuple[str, ...] = ()
    tokens: Mapping[str, JoinToken] = field(default_factory=dict)
    tokens_removed: tuple[str, ...] = ()
    unrecorded_seen: Mapping[int, float] = field(default_factory=dict)
    unrecorded_seen_removed: tuple[int, ...] = ()
    revoked_certs: tuple[int, ...] = ()  # appended
    alerts: tuple[Alert, ...] = ()  # raised
    next_id: int | None = None

    @property
    def empty(self) -> bool:
        return all(not getattr(self, f.name) for f in fields(self) if f.name != "next_id") and (
            self.next_id is None
        )

    @staticmethod
    def between(before: Records, after: Records) -> Changes:
        """The changes that make `before` into `after`."""
        out: dict[str, Any] = {}
        for table in TABLES:
            old: Mapping[Any, Any] = getattr(before, table)
            new: Mapping[Any, Any] = getattr(after, table)
            written = {k: v for k, v in new.items() if k not in old or _differs(old[k], v)}
            out[table] = written
            out[f"{table}_removed"] = tuple(k for k in old if k not in new)
        for name in SEQUENCES:
            old_items, new_items = getattr(before, name), getattr(after, name)
            if new_items[: len(old_items)] != old_items:
                raise ValueError(f"a plan only appends to {name}")
            out[name] = new_items[len(old_items) :]
        out["next_id"] = after.next_id if after.next_id != before.next_id else None
        return Changes(**out)

    def apply(self, records: Records) -> Records:
        """`records` with these changes laid on (entries written, keys removed, appended)."""
        if self.empty:
            return records
        out: dict[str, Any] = {}
        for table in TABLES:
            written: Mapping[Any, Any] = getattr(self, table)
            removed = set(getattr(self, f"{table}_removed"))
            if written or removed:
                current: Mapping[Any, Any] = getattr(records, table)
                kept = {k: v for k, v in current.items() if k not in removed}
                out[table] = {**kept, **written}
        for name in SEQUENCES:
            added = getattr(self, name)
            if added:
                out[name] = (*getattr(records, name), *added)
        if self.next_id is not None:
            out["next_id"] = max(records.next_id, self.next_id)
        return evolve(records, **out)


def _differs(old: object, new: object) -> bool:
    return old is not new and old != new
