"""What every scenario of the book shares: specs, the clock that follows the controller's own
deadlines, and the story read back from vastsim and the ledger.

A scenario is the whole controller as `watch` runs it (planner, nets, executor, the heads'
decisions, ledger) against an in-process vastsim on virtual time, with the real agent's state
machine in every container (`fleetsim.harness`). Nothing plays a worker by hand; failures are
injected at the boundary (the image, the network, Ray, vast).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleetsim.agents import AgentWorld
from fleetsim.harness import Fleet
from reconciler.applying.journal import Journal
from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import RayReport, scripted
from reconciler.model.labels import parse_label
from reconciler.model.observation import NodeKey
from reconciler.model.records import Intent, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.nets import idle
from reconciler.spec.text import spec_yaml
from reconciler.watch.controller import Controller
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.signals import AgentSignals
from tests.specs import load_spec

H = 3600.0
M = 60.0
IMAGE = "rayproject/ray:2.60.0-py311-cpu"


def cluster(name: str, **options: Any) -> ClusterSpec:
    """One cluster spec (`cluster_text`'s options), through the real loader (so the schema's
    defaults apply)."""
    return load_spec(cluster_text(name, **options), f"{name}.yaml")


def cluster_text(
    name: str,
    *,
    min_workers: int = 1,
    max_workers: int = 4,
    factor: int = 2,
    cap: float = 5.0,
    image: str = IMAGE,
    node: str = "gpu",
    watchdogs: Mapping[str, int] | None = None,
    node_extra: Mapping[str, Any] | None = None,
    head: str | None = None,
) -> str:
    text = spec_yaml(
        name,
        f"""\
        max_dollars_per_hour: {cap}
        node_types:
          {node}:
            min_workers: {min_workers}
            max_workers: {max_workers}
            candidate_factor: {factor}
            image: {image}
            disk_gb: 10
            offer:
              filters: {{num_gpus: {{eq: 1}}}}
        """,
    )
    for key, value in (node_extra or {}).items():
        text += f"      {key}: {json.dumps(value)}\n"
    if watchdogs:
        text += "  watchdogs:\n" + "".join(f"    {k}: {v}\n" for k, v in watchdogs.items())
    if head:
        text += f"  {head}\n"
    return text


def run(fleet: Fleet, until: float, *, each: Callable[[], None] | None = None) -> None:
    """Tick as `watch` does: at the next cadence or the earliest deadline a record holds."""
    fleet.advance(until, each=each)


# --- reading the story back ---------------------------------------------------------------------


def restart(fleet: Fleet) -> None:
    """The watch process dies and a new one starts from the state it wrote: a new journal read
    from the same store, a new controller, the same heads (their records now the new one's)."""
    old = fleet.controller
    journal = Journal(old.journal.store, old.journal.ledger, old.journal.store.read())
    fleet.controller = Controller(
        specs=dict(old.specs),
        journal=journal,
        provider=old.provider,
        launcher=old.launcher,
        clock=old.clock,
        signals=old.signals,
    )
    for app in fleet.heads.values():
        app.host, app.ledger = journal, journal.ledger


def ledger(fleet: Fleet) -> list[dict[str, Any]]:
    return [json.loads(line) for line in fleet.ledger.read_text().splitlines() if line.strip()]


def lines(fleet: Fleet, cls: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in ledger(fleet) if e["class"] == cls and (kind is None or e["kind"] == kind)]


def rented(fleet: Fleet, cluster_name: str | None = None) -> dict[int, float]:
    """Every instance vast ever created for us (live and gone): vast id -> created at."""
    return fleet.rentals(cluster_name)


def alive(fleet: Fleet, cluster_name: str | None = None) -> set[int]:
    """Instances of ours vast still has (and bills)."""
    return {
        i
        for i in fleet.sim.instances
        if (info := parse_label(fleet.sim.instances[i].label)) is not None
        and (cluster_name is None or info.cluster == cluster_name)
    }


def workers(fleet: Fleet, cluster_name: str) -> set[int]:
    """Live, running workers the records hold for a cluster."""
    records = fleet.controller.records()
    return {
        r.vast_id
        for r in records.instances.values()
        if r.cluster == cluster_name
        and r.role is Role.WORKER
        and r.live
        and r.intent is Intent.RUNNING
        and r.vast_id is not None
    }


def ended_by(fleet: Fleet) -> dict[int, str]:
    """vast id -> the ledger class of the decision that destroyed it (the planner's, the nets',
    the head's), and `worker_report:<reason>` when the agent ended itself first."""
    out: dict[int, str] = {}
    for entry in ledger(fleet):
        instance = entry.get("instance")
        if instance is None or instance in out:
            continue
        data = entry.get("data") or {}
        if entry["kind"] == "decision" and data.get("action") == "destroy":
            out[instance] = entry["class"]
        elif entry["class"] == "worker_report" and data.get("trusted"):
            out[instance] = f"worker_report:{data.get('reason')}"
    return out


def dollars(fleet: Fleet, cluster_name: str | None = None) -> float:
    """What vast's meter charged for our instances (of one cluster), up to now."""
    meter = fleet.sim.meter
    return sum(meter.instance(i) for i in rented(fleet, cluster_name))


def measured(entries: Iterable[dict[str, Any]], pattern: str) -> list[float]:
    """The figures a ledger detail states (e.g. "for 63s"), for limits measured on time."""
    out = []
    for entry in entries:
        found = re.search(pattern, entry["message"])
        if found:
            out.append(float(found.group(1)))
    return out


def in_windows(times: Sequence[float], start: float, end: float, width: float) -> list[int]:
    """How many of `times` fall in each window of `width` seconds from `start` to `end`."""
    counts = []
    at = start
    while at < end:
        counts.append(sum(1 for t in times if at <= t < at + width))
        at += width
    return counts


@dataclass
class Signals:
    """Ray's view as a scenario scripts it: demand and work per record over time, and whether
    Ray can be read at all. Unknown is `None`, as the real reader says it."""

    clock: Any
    demand_at: Callable[[float], Mapping[NodeKey, int]] = lambda now: {}
    work_at: Callable[[float, Records], Mapping[str, bool]] | None = None
    readable: Callable[[float], bool] = lambda now: True
    read_clusters: tuple[str, ...] = ()
    # The fleet's played Ray (`Fleet.agents`): a node Ray drains for idle termination has its
    # raylet exit, as Ray's does. None: draining ends nothing (Ray as it was played before).
    played: AgentWorld | None = None
    told: list[tuple[float, dict[str, AutoscalerState]]] = field(default_factory=list)

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        """Ray asking for the scripted workers, as a report the planner packs (`scripted`)."""
        self.read_clusters = tuple(specs)
        now = self.clock.now()
        return scripted(specs, self.demand_at(now)) if self.readable(now) else None

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        """Traffic from both sources, as `watch` composes them (`RayReaders.busy`): Ray's view
        of work where Ray can be read, and the agents' own samples."""
        ray = self.work_at(now, records) if self.work_at and self.readable(now) else {}
        read = set(records.instances) if self.work_at else set()
        return idle.traffic_by_record(ray, AgentSignals().busy(records, now), read)

    def probes(self, records: Records) -> Mapping[str, bool]:
        return {}

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        """What the controller told Ray, kept for the scenario to read (`told`)."""
        self.told.append((now, dict(states)))

    def unread(self) -> Collection[str]:
        """Every cluster of the last reading, while Ray cannot be read (its head is down)."""
        return () if self.readable(self.clock.now()) else self.read_clusters

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        """Ray's rule: a node with work on it refuses an idle drain; a node it drains ends its
        raylet (when the fleet's Ray is played)."""
        now = self.clock.now()
        if not self.readable(now):
            return None
        work = self.work_at(now, records) if self.work_at else {}
        answer = {rid: not work.get(rid, False) for rid in record_ids}
        if self.played is not None:
            for rid, accepted in answer.items():
                vast_id = records.instances[rid].vast_id if rid in records.instances else None
                if accepted and vast_id is not None:
                    self.played.drained(vast_id, now)
        return answer

    def work(self, records: Records) -> Mapping[str, bool] | None:
        now = self.clock.now()
        if self.work_at is None or not self.readable(now):
            return None
        return self.work_at(now, records)


@dataclass
class RayView(Signals):
    """One cluster's Ray reader as a scenario scripts it, read the way `watch` reads Ray: through
    `RayReaders` (`read_by_ray`), whose `busy` is Ray's view of the nodes and the agents' own
    samples together. Its own `busy` is Ray's half only, as `RaySignals` answers."""

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        if self.work_at is None or not self.readable(now):
            return {}
        return self.work_at(now, records)


def read_by_ray(fleet: Fleet, views: Mapping[str, Signals]) -> RayReaders:
    """The controller's signals as `watch` builds them: one reader per cluster (`views`, by
    cluster name), the agents' samples for the rest."""
    return RayReaders(fleet.controller.specs, make=lambda spec: views.get(spec.name))
