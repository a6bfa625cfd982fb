"""A fleet on virtual time: the real controller against an in-process vastsim, with agents played.

Used by the virtual-day test (`tests/watch/test_virtual_day.py`) and the fleet benchmark. Every
part on the path is real: vastsim on a `VirtualClock`, the vast client over `InProcessTransport`,
the `Controller` (planner, nets, executor, journal, ledger). Only the agents inside the containers
are played here: once a candidate's container runs, its agent enrolls and heartbeats through the
head's own pure decisions (`head.enrollment.enroll`, `head.heartbeats.heartbeat`), applied with
`Controller.mutate` as the head's service applies them. Each instance's agent has a `Mode`, which
is how a test or a benchmark makes a machine fail in one of the ways the seeds list.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from reconciler.applying.journal import Journal
from reconciler.applying.launch import ImageLauncher
from reconciler.head import enrollment, heartbeats, tokens
from reconciler.head.decisions import Destroy
from reconciler.head.destroyer import Destroyer
from reconciler.head.messages import EnrollRequest, Heartbeat, RaySample
from reconciler.head.pki import WorkerIdentity
from reconciler.model.codec import encode
from reconciler.model.observation import NodeKey
from reconciler.model.records import InstanceRecord, Intent, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerWriter, ledger_path
from reconciler.state.memory import MemoryStore
from reconciler.vast.client import VastClient
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings
from reconciler.watch.controller import AgentSignals, Controller
from vastsim import InProcessTransport, Market, Sim, Timing, VirtualClock

API_KEY = "harness-api-key-7c1d"
START = 1_790_000_000.0


class Mode(StrEnum):
    HEALTHY = "healthy"  # enrolls, heartbeats, busy while there is demand
    NEVER_ENROLLS = "never-enrolls"  # the container runs, the start-up never completes
    SILENT = "silent"  # enrolled once, then its worker process died: no more heartbeats


class SimClock:
    """`reconciler.clock.Clock` over the simulator's clock: sleeping advances the world."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.clock.now()

    def sleep(self, seconds: float) -> None:
        self.sim.advance(max(0.0, seconds))


@dataclass
class DemandSignals(AgentSignals):
    """Ray's pending demand as a function of time; busy from the agents' own samples."""

    clock: SimClock | None = None
    demand_at: Callable[[float], Mapping[NodeKey, int]] = lambda now: {}

    def __post_init__(self) -> None:
        super().__init__()

    def demand(self, specs: Mapping[str, ClusterSpec]) -> Mapping[NodeKey, int]:
        return self.demand_at(self.clock.now()) if self.clock else {}


@dataclass
class Agents:
    """The agents of every container, played: enroll when running, heartbeat every interval."""

    controller: Controller
    sim: Sim
    modes: dict[int, Mode] = field(default_factory=dict)
    next_mode: Callable[[int], Mode] = lambda vast_id: Mode.HEALTHY
    working: Callable[[float], bool] = lambda now: True
    last_beat: dict[int, float] = field(default_factory=dict)
    serial: int = 1
    seq: int = 0
    _destroys: list[Destroy] = field(default_factory=list)

    def mode(self, vast_id: int) -> Mode:
        if vast_id not in self.modes:
            self.modes[vast_id] = self.next_mode(vast_id)
        return self.modes[vast_id]

    def act(self) -> None:
        running = {
            i.id: i.public_ip for i in self.sim.instances.values() if i.actual_status == "running"
        }
        self.controller.mutate(lambda records, now: self._act(records, now, running))
        # the head ends extra candidates at once, after the enrollment is saved
        for cluster in self.controller.specs:
            destroyer = Destroyer(
                cluster=cluster,
                provider=self.controller.provider,
                host=self.controller,
                ledger=self.controller.journal,
                clock=self.controller.clock,
            )
            for destroy in [d for d in self._destroys if self._cluster_of(d) == cluster]:
                destroyer.carry_out(destroy)
        self._destroys.clear()

    def _cluster_of(self, destroy: Destroy) -> str | None:
        record = self.controller.records().instances.get(destroy.record_id)
        return record.cluster if record else None

    def _act(self, records: Records, now: float, running: Mapping[int, str]) -> Records:
        for cluster, spec in self.controller.specs.items():
            for record in list(records.instances.values()):
                ip = running.get(record.vast_id) if record.vast_id is not None else None
                if record.cluster != cluster or ip is None:
                    continue
                if not record.live or record.intent is not Intent.RUNNING:
                    continue
                records = self._one(records, record, spec, now, ip)
        return records

    def _one(
        self, records: Records, record: InstanceRecord, spec: ClusterSpec, now: float, ip: str
    ) -> Records:
        vast_id = record.vast_id or 0
        mode = self.mode(vast_id)
        if record.role is Role.CANDIDATE and mode is not Mode.NEVER_ENROLLS:
            return self._enroll(records, record, spec, now, ip)
        if record.role is Role.WORKER and mode is Mode.HEALTHY:
            due = (
                now - self.last_beat.get(vast_id, 0.0) >= spec.watchdogs.heartbeat_interval_seconds
            )
            if due:
                self.last_beat[vast_id] = now
                return self._beat(records, record, spec, now)
        return records

    def _enroll(
        self, records: Records, record: InstanceRecord, spec: ClusterSpec, now: float, ip: str
    ) -> Records:
        token = tokens.mint()
        window = tokens.enrollment_window(spec, spec.node_types[record.node_type])
        records = tokens.with_token(
            records,
            tokens.join_token(
                token, cluster=spec.name, record_id=record.id, now=now, window=window
            ),
        )
        vast_id = record.vast_id or 0
        request = EnrollRequest(
            token=token,
            instance_id=vast_id,
            boot_id=f"boot-{vast_id}",
            public_ip=ip,
            ports={},
            cpus=8,
            gpus=1,
        )
        self.serial += 1
        decision = enrollment.enroll(
            records,
            request,
            cluster=spec.name,
            lineage=self.controller.journal.lineage,
            now=now,
            serial=self.serial,
        )
        self._destroys.extend(decision.destroys)
        return decision.records if decision.refusal is None else records

    def _beat(
        self, records: Records, record: InstanceRecord, spec: ClusterSpec, now: float
    ) -> Records:
        self.seq += 1
        vast_id = record.vast_id or 0
        identity = WorkerIdentity(spec.name, record.id, vast_id, record.slot_id or "", serial=1)
        work = self.working(now)
        beat = Heartbeat(
            instance_id=vast_id,
            record_id=record.id,
            boot_id=f"boot-{vast_id}",
            seq=self.seq,
            sent_at=now,
            ray=RaySample("running", 4242, None, 60.0),
            pids=120,
            pids_limit=None,
            worker_ports_in_use=(),
            worker_ports_total=100,
            sample_seconds=30.0,
            cpu_fraction=0.8 if work else 0.01,
            load1=4.0 if work else 0.0,
            memory_used_fraction=0.4,
            net_rx_bytes=50_000_000 if work else 0,
            net_tx_bytes=5_000_000 if work else 0,
            gpu_fraction=0.9 if work else 0.0,
            received_at=now,
        )
        decision = heartbeats.heartbeat(
            records,
            identity,
            beat,
            cluster=spec.name,
            lineage=self.controller.journal.lineage,
            now=now,
        )
        return decision.records if decision.refusal is None else records


@dataclass
class Fleet:
    sim: Sim
    clock: SimClock
    client: VastClient
    controller: Controller
    agents: Agents
    signals: DemandSignals
    ledger: Path

    def run_until(
        self, until: float, *, step: float = 15.0, each: Callable[[], None] | None = None
    ) -> None:
        """Agents act, the controller ticks, time moves on by `step`, until `until`."""
        while self.clock.now() < until:
            self.agents.act()
            self.controller.tick()
            if each is not None:
                each()
            self.clock.sleep(step)


@contextlib.contextmanager
def fleet(
    spec: ClusterSpec,
    *,
    market: Market | None = None,
    timing: Timing | None = None,
) -> Iterator[Fleet]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        Sim(
            market=market or Market.default(),
            clock=VirtualClock(START),
            api_key=API_KEY,
            timing=timing or Timing(),
        ) as sim,
    ):
        clock = SimClock(sim)
        store = MemoryStore(clock=clock, secrets=(API_KEY,))
        store.lock("watch")
        snapshot = store.write(encode(Records()), based_on=None)
        client = client_from_settings(
            env={"VAST_API_KEY": API_KEY, "VAST_URL": "http://vastsim"},
            spec_url=None,
            clock=clock,
            transport=InProcessTransport(sim),
            settings=ClientSettings(pacing=False),
        )
        signals = DemandSignals(clock=clock)
        with (
            client,
            LedgerWriter.open(ledger_path(Path(tmp)), clock=clock, secrets=(API_KEY,)) as ledger,
        ):
            journal = Journal(store, ledger, snapshot)
            controller = Controller(
                specs={spec.name: spec},
                journal=journal,
                provider=client,
                launcher=ImageLauncher(),
                clock=clock,
                signals=signals,
            )
            agents = Agents(controller, sim)
            yield Fleet(sim, clock, client, controller, agents, signals, ledger_path(Path(tmp)))
