"""Ray's view, one reader per cluster, kept in step with the specs.

Each cluster has its own Ray head (its own address and token), so each has its own reader
(`RaySignals`). `RayReaders` is the controller's `Signals` over all of them: every question is
asked of the reader of the cluster it is about, and each answer is kept to that cluster's records.
It follows reloads as the head services do (the runner calls `reload` on every `Reloadable`): a
cluster added gets a reader, a removed one's reader is dropped, one whose head moved gets a new
one. A cluster without a reader (none could be made: no token yet, its Ray head not started) is
read as a controller without Ray reads it (`AgentSignals`: the agents' samples); making one is
tried again at the next reload.

A reader that fails answers "unknown" for its cluster only: no demand known (None when it was the
only cluster asked), its records' busy and probes absent, their pins kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from reconciler.head.pki import RAY_TOKEN_FILE, pki_dir
from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import RayReport
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.nets import idle
from reconciler.watch.raysignals import RaySignals
from reconciler.watch.signals import AgentSignals, Signals

log = logging.getLogger("ray_vast")

T = TypeVar("T")

# Makes the reader of one cluster; None when it has none (yet).
ReaderFactory = Callable[[ClusterSpec], Signals | None]


class RayReaders:
    """The `Signals` of every cluster's own Ray reader, by cluster name."""

    def __init__(
        self,
        specs: Mapping[str, ClusterSpec],
        make: ReaderFactory,
        *,
        fallback: Signals | None = None,
    ) -> None:
        self.make = make
        self.fallback: Signals = fallback if fallback is not None else AgentSignals()
        self.readers: dict[str, Signals] = {}
        self._heads: dict[str, tuple[str, int]] = {}  # the Ray head each reader reads
        self._failing: set[tuple[str, str]] = set()  # (cluster, question) failing now
        self._unread: set[str] = set()  # clusters whose last demand reading failed
        self.reload(specs)

    @classmethod
    def from_pki(cls, state_dir: Path, specs: Mapping[str, ClusterSpec]) -> RayReaders:
        """The readers of the clusters whose Ray token is in their PKI under `state_dir` (the
        head's Ray runs with that token: `ray-vast up` starts it so); a cluster without one yet,
        or added by a reload, gets its reader at a reload, once its token is there."""

        def reader(spec: ClusterSpec) -> RaySignals | None:
            token = pki_dir(state_dir, spec.name) / RAY_TOKEN_FILE
            if not token.exists():
                return None
            address = f"{spec.head.address}:{spec.head.ray_port}"
            return RaySignals(address, spec.name, token_path=str(token))

        return cls(specs, make=reader)

    # --- following the specs -------------------------------------------------------------------

    def reload(self, specs: Mapping[str, ClusterSpec]) -> None:
        for name in sorted(set(self.readers) - set(specs)):
            self._drop(name)
        for name, spec in specs.items():
            if name in self.readers and self._heads.get(name) != _ray_head(spec):
                self._drop(name)  # its head moved (address, port): a reader of the new one
            if name not in self.readers:
                self._add(name, spec)

    def stop(self) -> None:
        for name in sorted(self.readers):
            self._drop(name)

    def _add(self, name: str, spec: ClusterSpec) -> None:
        try:
            reader = self.make(spec)
        except Exception as exc:
            log.warning(
                "no Ray reader for %s (%s: %s); tried again at the next reload",
                name,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            return
        if reader is None:
            return
        self.readers[name] = reader
        self._heads[name] = _ray_head(spec)
        log.info("Ray of %s read at %s:%d", name, spec.head.address, spec.head.ray_port)

    def _drop(self, name: str) -> None:
        reader = self.readers.pop(name)
        self._heads.pop(name, None)
        self._failing = {f for f in self._failing if f[0] != name}
        close = getattr(reader, "close", None)
        if callable(close):
            try:
                close()
            except Exception as exc:
                log.warning("the Ray reader of %s did not close: %s", name, exc)

    # --- Signals ---------------------------------------------------------------------------------

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        """Each asked cluster's report from its own reader; a failed reader's cluster is left
        out (nothing known of it). None only when nothing answered."""
        out: dict[str, RayReport] = {}
        answered = False
        for name, spec in specs.items():
            reader = self.readers.get(name)
            if reader is None:
                continue
            part = self._ask(name, "demand", reader.reports, {name: spec})
            if part is None:
                self._unread.add(name)
                continue
            self._unread.discard(name)
            answered = True
            out.update({cluster: r for cluster, r in part.items() if cluster == name})
        others = {n: s for n, s in specs.items() if n not in self.readers}
        if others:
            rest = self.fallback.reports(others)
            if rest is not None:
                answered = True
                out.update({cluster: r for cluster, r in rest.items() if cluster in others})
        return out if answered else None

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        """Each cluster's state to its own reader's head (a cluster with no reader: nobody)."""
        for name, reader in self.readers.items():
            if name in states:
                self._ask(name, "tell", reader.tell, {name: states[name]}, now)

    def unread(self) -> frozenset[str]:
        """Clusters with a reader whose last demand reading failed (their Ray head is down or
        unreachable)."""
        return frozenset(self._unread & set(self.readers))

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        """Traffic from both sources (DESIGN.md 5): Ray's view of each node where its cluster has
        a reader, and every agent's own live sample; either one showing work is traffic."""
        ray: dict[str, bool | None] = {}
        for name, reader in self.readers.items():
            part = self._ask(name, "busy", reader.busy, records, now)
            ray.update(_own(part or {}, records, {name}))
        read = {r.id for r in records.instances.values() if r.cluster in self.readers}
        return idle.traffic_by_record(ray, self.fallback.busy(records, now), read)

    def probes(self, records: Records) -> Mapping[str, bool]:
        out: dict[str, bool] = {}
        for name, reader in self.readers.items():
            part = self._ask(name, "probes", reader.probes, records)
            out.update(_own(part or {}, records, {name}))
        out.update(_own(self.fallback.probes(records), records, self._readerless(records)))
        return out

    def work(self, records: Records) -> Mapping[str, bool] | None:
        """Per record of each cluster whose reader answered; None when none did (records not
        named keep their pin)."""
        out: dict[str, bool] = {}
        answered = False
        for name, reader in self.readers.items():
            part = self._ask(name, "work", reader.work, records)
            if part is None:
                continue
            answered = True
            out.update(_own(part, records, {name}))
        rest = self.fallback.work(records)
        if rest is not None:
            answered = True
            out.update(_own(rest, records, self._readerless(records)))
        return out if answered else None

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        """Each cluster's idle nodes drained by its own reader; None when none was asked."""
        out: dict[str, bool] = {}
        asked = False
        for name, ids in sorted(_by_cluster(records, record_ids).items()):
            reader = self.readers.get(name)
            if reader is None:
                continue
            part = self._ask(name, "drain_idle", reader.drain_idle, records, ids, deadline)
            if part is not None:
                asked = True
                out.update({rid: ok for rid, ok in part.items() if rid in ids})
        return out if asked else None

    # --- helpers ---------------------------------------------------------------------------------

    def _readerless(self, records: Records) -> set[str]:
        return {r.cluster for r in records.instances.values()} - set(self.readers)

    def _ask(self, cluster: str, question: str, call: Callable[..., T], *args: object) -> T | None:
        """One reader's answer; None (unknown for its cluster only) when it raises. The first
        failure of a run is logged with its traceback, the rest in one line each."""
        key = (cluster, question)
        try:
            value = call(*args)
        except Exception as exc:
            first = key not in self._failing
            self._failing.add(key)
            log.warning(
                "Ray %s of %s not read (%s: %s); unknown this tick",
                question,
                cluster,
                type(exc).__name__,
                exc,
                exc_info=exc if first else None,
            )
            return None
        self._failing.discard(key)
        return value


def _ray_head(spec: ClusterSpec) -> tuple[str, int]:
    return (spec.head.address, spec.head.ray_port)


def _own(answer: Mapping[str, T], records: Records, clusters: set[str]) -> dict[str, T]:
    """The part of a reader's answer about records of its own clusters (a head speaks only for
    the nodes of its cluster)."""
    return {
        record_id: value
        for record_id, value in answer.items()
        if (record := records.instances.get(record_id)) is not None and record.cluster in clusters
    }


def _by_cluster(records: Records, record_ids: Sequence[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for record_id in record_ids:
        record = records.instances.get(record_id)
        if record is not None:
            out.setdefault(record.cluster, []).append(record_id)
    return out
