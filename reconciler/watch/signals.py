"""What the controller learns from Ray and the agents, read once per tick.

`Signals` is the reader's contract (`watch/rayreaders.py` implements it against Ray's GCS, one
head per cluster); `AgentSignals` is the fallback when no Ray reader is attached: the agents' own
heartbeat samples. Anything that could not be read is "unknown" (None), never "no demand" or
"idle": every net and every plan treats unknown as a reason not to act.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import RayReport
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec


class Signals(Protocol):
    """What the controller learns from Ray and the agents, read once per tick. Anything that
    could not be read is "unknown" (None), never "no demand" or "idle"."""

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        """What each asked cluster's Ray head reported (its demand and live nodes), by cluster;
        a cluster whose head could not be read is left out. None: nothing could be read."""
        ...

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        """Tell each cluster's Ray head what ray-vast, its autoscaler, is doing (pending and
        failed launches, infeasible demand), as Ray's autoscaler reports it; a head that cannot
        be told is told at the next reading."""
        ...

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]: ...

    def probes(self, records: Records) -> Mapping[str, bool]: ...

    def work(self, records: Records) -> Mapping[str, bool] | None:
        """Per record of the clusters this reader serves: whether Ray reports work on its node
        (leased resources, actors, placement-group bundles; False when Ray has no live node of
        it); None when Ray could not be read. Records it does not name keep their pin."""
        ...

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        """Before the money chain ends idle machines: ask Ray to drain their nodes for idle
        termination (as autoscaler v2 does, with a deadline); per record, whether Ray accepted
        (a rejection means Ray has work there: busy). None: Ray was not asked (not read)."""
        ...

    def unread(self) -> Collection[str]:
        """The clusters whose Ray head the last `reports` reading could not read (a Ray head that
        is down: workers could not join it, so nothing is rented for it after a while)."""
        ...


class AgentSignals:
    """Signals from the agents' own heartbeat samples only (no Ray reader attached)."""

    def __init__(self, freshness: float = 90.0) -> None:
        self.freshness = freshness

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport]:
        return {}

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        return None

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        return {
            r.id: (r.sample_busy if r.sample_at and now - r.sample_at <= self.freshness else None)
            for r in records.instances.values()
        }

    def probes(self, records: Records) -> Mapping[str, bool]:
        return {}

    def work(self, records: Records) -> Mapping[str, bool] | None:
        return None

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        return None

    def unread(self) -> Collection[str]:
        return ()
