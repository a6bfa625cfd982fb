"""A fleet on virtual time: the real controller, the real heads and the real agent's decisions,
against an in-process vastsim.

Used by the virtual-day test (`tests/watch/test_virtual_day.py`), the storm tests, the fleet
benchmark and `ray-vast simulate` (`fleetsim.simulate`: it is packaged for that). Every part on
the path is real: vastsim on a `VirtualClock`,
the vast client over `InProcessTransport`, the `Controller` (planner, nets, executor, journal,
ledger), and per cluster a head: its PKI (`reconciler.watch.headside.cluster_pki`), its
`HeadApp` (schemas, decisions, the records lock, the ledger) called in-process, and its launcher
(`reconciler.head.launcher.AgentLauncher.for_app`), so every rent carries the bootloader, a real
join token, the CA and the head's address in its environment, as on vast. The head's own destroys
(extra candidates, failed token checks) go to the controller's one applier, carried out at once
on the virtual clock (`Applier.in_caller`) instead of on the applier's thread.

Inside each container runs the agent's state machine (`fleetsim.agents`): nothing plays a worker by
hand. A test or a benchmark makes a machine fail only at the boundary, per instance
(`Fleet.agents.faults[vast_id] = ContainerFault(...)`, or `fleet(faults=...)` / `next_fault` to
choose one for each new instance), and says whether each node has work (`working`); vastsim's own
faults stay as they are (`Fleet.sim.faults`).

    with fleet([spec_a, spec_b], faults=lambda vast_id: HEALTHY, working=lambda now: True) as f:
        f.run_until(START + 3600)
        f.agents.faults[vast_id] = ContainerFault(ray_exits_at=f.clock.now() + 60)
        f.run_until(f.clock.now() + 300)
        f.agent(vast_id).ending         # Report(reason="ray_exited", ...)
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fleetsim.agents import DOCKER_STOP_GRACE, AgentBehaviour, AgentWorld, ContainerFault
from reconciler import rayruntime
from reconciler.applying.journal import Journal
from reconciler.applying.launch import ImageLauncher, Launcher
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints
from reconciler.head.app import HeadApp
from reconciler.head.launcher import AgentLauncher
from reconciler.model.codec import encode
from reconciler.model.demand import RayReport, scripted
from reconciler.model.labels import parse_label
from reconciler.model.observation import NodeKey
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.state.filestore import FileStore
from reconciler.state.ledger import LedgerWriter, ledger_path
from reconciler.state.memory import MemoryStore
from reconciler.state.store import StateStore
from reconciler.vast.client import VastClient
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings
from reconciler.watch.controller import Controller
from reconciler.watch.headside import ByCluster, cluster_pki
from reconciler.watch.signals import AgentSignals
from vastsim import InProcessTransport, Market, ScriptedRunner, Sim, Timing, VirtualClock

API_KEY = "harness-api-key-7c1d"
VAST_URL = "http://vastsim"
START = 1_790_000_000.0
PORT_STEP = 100  # two clusters that name the same head ports get ports this far apart


class SimClock:
    """`reconciler.clock.Clock` over the simulator's clock: sleeping advances the world."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.clock.now()

    def sleep(self, seconds: float) -> None:
        self.sim.advance(max(0.0, seconds))

    def wait(self, stop: threading.Event, seconds: float) -> None:
        self.sleep(seconds)


@dataclass
class DemandSignals(AgentSignals):
    """Ray's pending demand as a function of time; busy from the agents' own samples.

    `readable` says whether Ray's head can be read at a moment: while it cannot, demand and work
    are unknown (None), as the real reader says them. `work_at` is Ray's view of work on the
    nodes (record id -> work: leased resources, actors, bundles), which pins a machine (reaper
    gate 3); None: Ray is not asked (no Ray pins), as before."""

    clock: SimClock | None = None
    demand_at: Callable[[float], Mapping[NodeKey, int]] = lambda now: {}
    readable: Callable[[float], bool] = lambda now: True
    work_at: Callable[[float, Records], Mapping[str, bool]] | None = None
    read_clusters: tuple[str, ...] = ()
    by_shape: bool = False  # the tasks ask for a shape, not a node type (`asking_for`)

    def __post_init__(self) -> None:
        super().__init__()

    def reports(  # type: ignore[override]
        self, specs: Mapping[str, ClusterSpec]
    ) -> Mapping[str, RayReport] | None:
        """Ray asking for the scripted workers, as a report the planner packs (`scripted`)."""
        if self.clock is None:
            return {}
        self.read_clusters = tuple(specs)
        now = self.clock.now()
        if not self.readable(now):
            return None
        return scripted(specs, self.demand_at(now), by_shape=self.by_shape)

    def unread(self) -> tuple[str, ...]:
        """Every cluster of the last reading while Ray's head cannot be read (the controller
        then rents nothing for them after a while, DESIGN.md 11)."""
        if self.clock is None or self.readable(self.clock.now()):
            return ()
        return self.read_clusters

    def work(self, records: Records) -> Mapping[str, bool] | None:
        if self.clock is None or self.work_at is None or not self.readable(self.clock.now()):
            return None
        return self.work_at(self.clock.now(), records)


@dataclass
class TypedJournal(Journal):
    """The controller's journal, keeping the typed records instead of re-encoding the state.

    The real `Journal.save` encodes the whole state and the store redacts, encodes and decodes
    it again, on every change; the controller then goes on with the very records object it
    handed in (the real journal caches that object), so no decision ever reads what the round
    trip produced. Destroyed records are kept until retention drops them, so the round trip
    grows with every rental and would dominate a long run. Skipping it changes no figure
    (`simulate(real_store=True)` runs the real one); the ledger is still written by the real
    `LedgerWriter`."""

    _current: Records | None = None
    _saves: int = 0

    @property
    def serial(self) -> int:
        return self.snapshot.serial + self._saves

    def records(self) -> Records:
        return self._current if self._current is not None else super().records()

    def save(self, records: Records) -> None:
        if records == self.records():
            return
        self._current = records
        self._saves += 1

    def keep(self, records: Records, now: float) -> None:
        """Saved at once: a save here costs nothing, and the records are the same either way."""
        self.save(records)


@dataclass
class Fleet:
    sim: Sim
    clock: SimClock
    client: VastClient
    controller: Controller
    heads: dict[str, HeadApp]  # by cluster
    agents: AgentWorld
    signals: DemandSignals
    ledger: Path

    @property
    def faults(self) -> dict[int, ContainerFault]:
        """Each instance's fault (set one at any time; `agents.next_fault` picks new ones)."""
        return self.agents.faults

    def set_specs(self, specs: Sequence[ClusterSpec]) -> None:
        """A spec directory changed (`watch` reloading it): the controller takes the new specs
        and each head still serving a cluster takes its new version, as `watch`'s services do
        (the head of a cluster no longer declared keeps answering here)."""
        self.controller.set_specs({spec.name: spec for spec in specs})
        for spec in specs:
            if spec.name in self.heads:
                self.heads[spec.name].set_spec(spec)

    def agent(self, vast_id: int) -> AgentBehaviour | None:
        """What the agent of an instance's latest boot did (its machine state, reports, calls)."""
        return self.agents.agent(vast_id)

    def tick(self) -> None:
        """One controller tick; then agents whose moment came during it act, at once."""
        with self.agents.turn():
            self.controller.tick()
        self.sim.step()

    def advance(self, until: float, *, each: Callable[[], None] | None = None) -> None:
        """Tick as `watch` does until `until`: at the next cadence or the earliest deadline a
        record holds, whichever comes first (at most 15 s apart, at least 1 s: a deadline may
        fall due at once); the agents act at their own moments in between."""
        while self.clock.now() < until:
            self.tick()
            if each is not None:
                each()
            now = self.clock.now()
            wait = min(15.0, self.controller.next_wakeup(now), until - now)
            self.clock.sleep(max(1.0, wait))

    def rentals(self, cluster: str | None = None) -> dict[int, float]:
        """Every instance vast ever created for us (live and gone): vast id -> created at."""
        out: dict[int, float] = {}
        for vast_id in set(self.sim.instances) | set(self.sim.fleet.gone):
            inst = self.sim.instance(vast_id)
            info = parse_label(inst.label if inst else None)
            if inst is not None and info is not None and cluster in (None, info.cluster):
                out[vast_id] = inst.created_at
        return out

    def run_until(
        self, until: float, *, step: float = 15.0, each: Callable[[], None] | None = None
    ) -> None:
        """The controller ticks every `step` seconds until `until`; the agents act at their own
        moments in between (the simulator's clock jumps to each)."""
        while self.clock.now() < until:
            self.tick()
            if each is not None:
                each()
            self.clock.sleep(step)


@contextlib.contextmanager
def fleet(
    specs: ClusterSpec | Sequence[ClusterSpec],
    *,
    market: Market | None = None,
    timing: Timing | None = None,
    faults: Callable[[int], ContainerFault] | None = None,
    working: Callable[[float], bool] | None = None,
    versions: RayVersions | None = None,
    images: Mapping[str, RayVersions] | None = None,
    state_dir: Path | None = None,
    typed: bool = False,
    rate_limits: bool = False,
) -> Iterator[Fleet]:
    """A controller for `specs` (one cluster or several), one head per cluster, vastsim with the
    agent in every container of ours; torn down (every instance destroyed) on exit. `versions`
    is the Ray and Python the heads run (this process's by default) and every image runs unless
    `images` names another for it. `state_dir`: the state is a real state file there (locked
    while the fleet runs), with the ledger and the heads' PKI beside it, and is kept; else all of
    it is in memory and a temporary directory. `typed`: the journal keeps the typed records
    instead of re-encoding the state on every change (`TypedJournal`: the long runs' choice).
    `rate_limits`: vastsim answers a call inside vast's interval with a 429, and the client
    paces itself as against vast (a create every 4.5 s; the scale-up benchmark's world)."""
    clusters = [specs] if isinstance(specs, ClusterSpec) else list(specs)
    bundle = AgentBundle.load()
    world = AgentWorld(bootloader=bundle.bootloader)
    head_versions = versions if versions is not None else rayruntime.local()
    world.default_image = head_versions
    world.images.update(images or {})
    if faults is not None:
        world.next_fault = faults
    if working is not None:
        world.working = working
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(dir=scratch_root()) as tmp,
        Sim(
            market=market or Market.default(),
            clock=VirtualClock(START),
            api_key=API_KEY,
            timing=timing or Timing(),
            runner=ScriptedRunner(world.behaviour, stop_grace=DOCKER_STOP_GRACE),
        ) as sim,
    ):
        world.attach(sim)
        if rate_limits:
            sim.faults.enable_rate_limits()
        clock = SimClock(sim)
        where = Path(tmp) if state_dir is None else state_dir
        store: StateStore = (
            MemoryStore(clock=clock, secrets=(API_KEY,))
            if state_dir is None
            else FileStore(state_dir, clock=clock, secrets=(API_KEY,))
        )
        store.lock("watch")
        stack.callback(store.unlock)
        snapshot = store.write(encode(Records()), based_on=None)
        client = client_from_settings(
            env={"VAST_API_KEY": API_KEY, "VAST_URL": VAST_URL},
            spec_url=None,
            clock=clock,
            transport=InProcessTransport(sim),
            settings=ClientSettings(pacing=rate_limits),
            rng=random.Random(0),  # noqa: S311 - the retries' jitter, seeded so a run replays
        )
        signals = DemandSignals(clock=clock)
        with (
            client,
            LedgerWriter.open(ledger_path(where), clock=clock, secrets=(API_KEY,)) as ledger,
        ):
            journal = (TypedJournal if typed else Journal)(store, ledger, snapshot)
            controller = Controller(
                specs={spec.name: spec for spec in clusters},
                journal=journal,
                provider=client,
                launcher=ImageLauncher(),
                clock=clock,
                signals=signals,
            )
            heads = _heads(controller, clusters, where, bundle, clock, versions=head_versions)
            launchers: dict[str, Launcher] = {}
            for name, app in heads.items():
                world.serve(app)
                launchers[name] = AgentLauncher.for_app(
                    app, vast_url=VAST_URL, clock=clock, forbidden=(API_KEY,)
                )
            controller.launcher = ByCluster(launchers, ImageLauncher())
            yield Fleet(sim, clock, client, controller, heads, world, signals, ledger_path(where))


def scratch_root() -> str | None:
    """Where a fleet with no kept state puts its scratch ledger and PKI: RAM (`/dev/shm`) where
    the machine has it. The ledger syncs every batch of lines to disk, as it must for a real
    bill; on virtual time nothing survives the run, and on a slow disk those syncs were a tenth
    of the adversary's wall time (1,434 `fsync`s in one 6-hour seed)."""
    shm = Path("/dev/shm")  # noqa: S108 (mkdtemp makes a private 0700 directory in it)
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _heads(
    controller: Controller,
    clusters: Sequence[ClusterSpec],
    state_dir: Path,
    bundle: AgentBundle,
    clock: SimClock,
    *,
    versions: RayVersions,
) -> dict[str, HeadApp]:
    """One `HeadApp` per cluster, sharing the controller's records and ledger, each at its own
    (virtual) ports: nothing is bound, the agents call the apps in-process."""
    heads: dict[str, HeadApp] = {}
    taken: set[tuple[str, int]] = set()
    for spec in clusters:
        head = spec.head
        enroll, beat = head.enroll_port, head.heartbeat_port
        while {(head.address, enroll), (head.address, beat)} & taken:
            enroll, beat = enroll + PORT_STEP, beat + PORT_STEP
        taken |= {(head.address, enroll), (head.address, beat)}
        heads[spec.name] = HeadApp(
            spec=spec,
            cluster_pki=cluster_pki(state_dir, spec, clock.now()),
            host=controller.journal,
            ledger=controller.journal.ledger,
            applier=controller.applier.in_caller(),
            lineage=controller.journal.lineage,
            clock=clock,
            endpoints=HeadEndpoints(head.address, head.ray_port, enroll, beat),
            agent=bundle,
            versions=versions,
        )
    return heads
