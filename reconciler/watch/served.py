"""Which clusters the head services and Ray's readers serve: the declared ones, and a removed
cluster's last spec while the records still hold live machines of it.

A removed spec does not end a machine that work or a person's pin holds (DESIGN.md 11, "Pins
hold against prune"): it is held until the pin or the work ends, then pruned. Held, it still
needs its head: without the head's heartbeat answers its agent ends it after 300 s (the seed),
and without its cluster's Ray reader the work that pins it is never read again, so it would be
held, and billed, for good. So the services follow the specs as `served` gives them, and are
told again whenever that set changes (the last held machine of a removed cluster pruned).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec


class Follower(Protocol):
    def reload(self, specs: Mapping[str, ClusterSpec]) -> None: ...


@dataclass
class Served:
    """The specs the services follow, and what they were last told."""

    known: dict[str, ClusterSpec] = field(default_factory=dict)
    told: dict[str, int] = field(default_factory=dict)  # cluster -> id of the spec told

    def specs(
        self, declared: Mapping[str, ClusterSpec], records: Records, lineage: str
    ) -> dict[str, ClusterSpec]:
        """The declared specs, and the last spec of each removed cluster that has live
        machines of ours."""
        self.known.update(declared)
        held = {r.cluster for r in records.instances.values() if r.live and r.managed_by == lineage}
        out = dict(declared)
        for name in sorted(held - set(declared)):
            if name in self.known:
                out[name] = self.known[name]
        return out

    def follow(
        self,
        followers: Sequence[object],
        declared: Mapping[str, ClusterSpec],
        records: Records,
        lineage: str,
        *,
        force: bool = False,
    ) -> bool:
        """Tell every follower the served specs when they changed (or `force`); whether told."""
        specs = self.specs(declared, records, lineage)
        now = {name: id(spec) for name, spec in specs.items()}
        if now == self.told and not force:
            return False
        self.told = now
        for follower in followers:
            reload = getattr(follower, "reload", None)
            if callable(reload):
                reload(specs)
        return True
