"""Playing one adversary world (`fleetsim.adversary`) into a fleet on virtual time, and judging it.

`run(seed, hours)` builds the fleet (`fleetsim.harness.fleet`: the real controller, heads, ledger
and the agent's state machine in every container), plays the world into it (`Play`: the specs and
their edits, Ray's demand and work, the person's pins, the broken cheap hosts, every container's
fault, vastsim's faults when due) and checks the invariants after every tick
(`fleetsim.invariants.Judge`). `Play.faulted` is the ground truth the judge reads: whether the
world broke an instance (its container, its host, vast's side of it) at or before a moment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from fleetsim import adversary
from fleetsim.adversary import BROKEN_IMAGES, Event, WorkSchedule, World
from fleetsim.agents import ContainerFault, Image, Span
from fleetsim.harness import START, Fleet, fleet
from fleetsim.invariants import Counterexample, Judge, Key, Violation
from reconciler.applying.search import offer_search
from reconciler.model.orders import PinOrder
from reconciler.model.records import Intent, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.planning import pins
from reconciler.planning.offers import unfit_reason
from reconciler.state.ledger import LedgerEvent, LedgerKind
from vastsim import Market
from vastsim.generate import generate_machines
from vastsim.market import STANDARD_IMAGES, Machine, Traits

H = 3600.0
GENERATED_MACHINES = 40
HOST_IMAGES = {"idles": Image.IDLES, "no_python": Image.NO_PYTHON}


def market(world: World) -> Market:
    """vastsim's shipped market without its hosts' own traits (the world breaks hosts itself),
    and a few seeded generated machines beside it."""
    shipped = Market.default()
    machines = [dataclasses.replace(m, traits=Traits()) for m in shipped.machines.values()]
    machines += generate_machines(world.market_seed, GENERATED_MACHINES)
    return Market(machines, images={**STANDARD_IMAGES, **shipped.images})


@dataclass
class Play:
    world: World
    fleet: Fleet
    images: dict[str, dict[str, str]] = field(default_factory=dict)  # cluster -> node -> image
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    removed: set[str] = field(default_factory=set)
    works: dict[int, WorkSchedule] = field(default_factory=dict)
    broken: dict[int, str] = field(default_factory=dict)  # machine id -> break
    hits: dict[int, list[tuple[float, str]]] = field(default_factory=dict)  # vast id
    host_hits: dict[int, list[tuple[float, str]]] = field(default_factory=dict)  # machine id
    pinned: dict[int, str] = field(default_factory=dict)  # pick -> record id
    due: list[Event] = field(default_factory=list)
    judge: Judge | None = None

    # --- the world's specs --------------------------------------------------------------------

    def specs(self) -> list[ClusterSpec]:
        return adversary.specs_of(self.world, self.images, self.envs, self.removed)

    def names(self) -> Sequence[Key]:
        return adversary.names(self.world)

    def bound(self, key: Key) -> int | None:
        for c in self.world.clusters:
            for n in c.nodes:
                if (c.name, n.name) == key:
                    return c.breaker_slots * n.factor
        return None

    # --- installing ---------------------------------------------------------------------------

    def install(self) -> None:
        f = self.fleet
        self.due = list(self.world.events)
        self._break_cheapest()
        f.agents.next_fault = self._fault
        f.signals.demand_at = self._demand
        f.signals.readable = lambda now: (
            not any(s.covers(now - START) for s in self.world.unreadable)
        )
        f.signals.work_at = self._work

    def _break_cheapest(self) -> None:
        """The cheapest acceptable hosts of every node type are the broken ones (on vast they
        often are)."""
        f = self.fleet
        offers = []
        for spec in f.controller.specs.values():
            for nt in spec.node_types.values():
                found = f.client.search_offers(offer_search(nt))
                offers += [o for o in found if unfit_reason(o, nt) is None]
        machines: list[int] = []
        for offer in sorted(offers, key=lambda o: (o.dph_total, o.machine_id)):
            if offer.machine_id not in machines:
                machines.append(offer.machine_id)
        for machine_id, what in zip(machines, self.world.broken_hosts, strict=False):
            self.broken[machine_id] = what
            if what in ("oci_failure", "never_boots"):
                machine = f.sim.market.machine(machine_id)
                f.sim.mutate(_trait(f, machine, what))

    def _fault(self, vast_id: int) -> ContainerFault:
        now = self.fleet.clock.now()
        fault, work = adversary.container_fault(self.world, vast_id, now)
        self.works[vast_id] = work
        inst = self.fleet.sim.instance(vast_id)
        if inst is None:
            return fault
        what = self.broken.get(inst.machine.machine_id)
        if what in HOST_IMAGES:
            fault = dataclasses.replace(fault, image=HOST_IMAGES[what])
        elif what == "head_unreachable":
            fault = dataclasses.replace(fault, head_unreachable=Span())
        if inst.image in BROKEN_IMAGES and fault.image is Image.AGENT:
            fault = dataclasses.replace(fault, image=BROKEN_IMAGES[inst.image])
        return fault

    def _demand(self, now: float) -> Mapping[Key, int]:
        return {
            (c.name, n.name): n.wanted(now - START)
            for c in self.world.clusters
            if c.name not in self.removed
            for n in c.nodes
        }

    def _work(self, now: float, records: Records) -> Mapping[str, bool]:
        """Ray's view: work on a node while its node works and its container is unbroken (Ray
        reports a dead node as holding no work)."""
        out: dict[str, bool] = {}
        for r in records.instances.values():
            if r.vast_id is None or not r.live or r.role is not Role.WORKER:
                continue
            work = self.works.get(r.vast_id)
            if work is not None and r.intent is Intent.RUNNING:
                out[r.id] = work.busy(now) and not self.faulted(r.vast_id, now)
        return out

    # --- the ground truth ---------------------------------------------------------------------

    def faulted(self, vast_id: int, at: float) -> str | None:
        """What the world broke in this instance at or before `at` (None: nothing)."""
        for when, what in self.hits.get(vast_id, []):
            if when <= at:
                return what
        inst = self.fleet.sim.instance(vast_id)
        if inst is not None:
            machine = inst.machine.machine_id
            if machine in self.broken:
                return f"broken host ({self.broken[machine]})"
            for when, what in self.host_hits.get(machine, []):
                if when <= at:
                    return what
        fault = self.fleet.agents.faults.get(vast_id)
        return _container_fault(fault, at) if fault is not None else None

    # --- events -------------------------------------------------------------------------------

    def step(self) -> None:
        now = self.fleet.clock.now()
        while self.due and START + self.due[0].at <= now:
            self._happen(self.due.pop(0), now)

    def _happen(self, event: Event, now: float) -> None:
        if event.kind in ("edit", "remove"):
            self._spec_event(event, now)
        elif event.kind in ("pin", "unpin"):
            self._pin(event, now)
        else:
            vast_fault(self, event, now)

    def _spec_event(self, event: Event, now: float) -> None:
        if event.cluster in self.removed:
            return
        if event.kind == "remove":
            self.removed.add(event.cluster)
            if self.judge is not None:
                self.judge.story.removed[event.cluster] = now
        elif event.value.startswith("env:"):
            self.envs.setdefault(event.cluster, {})[event.node] = event.value
        else:
            self.images.setdefault(event.cluster, {})[event.node] = event.value
        self.fleet.set_specs(self.specs())

    def _pin(self, event: Event, now: float) -> None:
        """A person's pin or unpin, as `watch` takes the order: decided under the records lock
        (`planning.pins`), saved and ledgered."""
        controller = self.fleet.controller
        with controller.lock:
            records = controller.records()
            target = self.pinned.get(event.pick) if event.kind == "unpin" else _pick(records, event)
            if target is None:
                return
            seconds = float(event.value) if event.value else None
            order = PinOrder(target, "adversary", seconds=seconds, unpin=event.kind == "unpin")
            try:
                outcome = pins.decide(records, order, lineage=controller.journal.lineage, now=now)
            except pins.PinRefused:
                return
            if event.kind == "pin":
                self.pinned[event.pick] = target
            if outcome.changed:
                controller.journal.save(outcome.records)
                r = outcome.record
                controller.journal.ledger.append(
                    LedgerEvent(
                        r.cluster,
                        LedgerKind.DECISION,
                        outcome.cls,
                        outcome.message,
                        record=r.id,
                        instance=r.vast_id,
                        data=outcome.data,
                    )
                )


def _trait(f: Fleet, machine: Machine, what: str) -> Callable[[float], None]:
    return lambda now: f.sim.fleet.set_traits(machine, **{what: True})


def _pick(records: Records, event: Event) -> str | None:
    live = sorted(
        r.id
        for r in records.instances.values()
        if r.live and r.role is Role.WORKER and r.intent is Intent.RUNNING
    )
    return live[event.pick % len(live)] if live else None


def _container_fault(fault: ContainerFault, at: float) -> str | None:
    if fault.image is not Image.AGENT:
        return f"image {fault.image.value}"
    spans = {
        "head unreachable": fault.head_unreachable,
        "heartbeats blocked": fault.heartbeats_blocked,
        "vast unreachable": fault.vast_unreachable,
    }
    for what, span in spans.items():
        if span is not None and span.start <= at:
            return what
    for what, when in (("Ray exited", fault.ray_exits_at), ("PID 1 killed", fault.pid1_killed_at)):
        if when is not None and when <= at:
            return what
    return None


def vast_fault(play: Play, event: Event, now: float) -> None:
    """One of vastsim's faults (`fleetsim.adversary.VAST_FAULTS`), on the instance `pick` names."""
    sim, count = play.fleet.sim, int(event.value or "1")
    faults = sim.faults
    if event.kind == "rate_limit":
        faults.rate_limit("*", count)
    elif event.kind == "server_error":
        faults.server_error("*", count, after=event.pick % 2 == 0)
    elif event.kind == "lose_create_response":
        faults.lose_create_response(1)
    elif event.kind == "empty_listing":
        faults.empty_listing(1)
    elif event.kind == "fail_listing":
        faults.fail_listing(1, 500, count)
    else:
        _instance_fault(play, event, now)


def _instance_fault(play: Play, event: Event, now: float) -> None:
    sim = play.fleet.sim
    ours = sorted(v for v, i in sim.instances.items() if i.actual_status == "running")
    if not ours:
        return
    vast_id = ours[event.pick % len(ours)]
    inst = sim.instances[vast_id]
    if event.kind == "hide_instance":
        sim.faults.hide_instance(vast_id, 1)  # one listing without it ends nothing (rule 5)
        return
    if event.kind in ("offline", "change_ip"):
        play.host_hits.setdefault(inst.machine.machine_id, []).append((now, event.kind))
    else:
        play.hits.setdefault(vast_id, []).append((now, event.kind))
    if event.kind == "exit_instance":
        sim.faults.exit_instance(vast_id)
    elif event.kind == "offline":
        sim.faults.offline(vast_id)
    elif event.kind == "change_ip":
        sim.faults.change_ip(vast_id)
    elif event.kind == "unknown":
        sim.faults.unknown(vast_id)
    elif event.kind == "reboot":
        sim.mutate(lambda t: sim.fleet.reboot(inst, t))


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    seed: int
    hours: float
    ticks: int
    checks: int
    rentals: int
    violations: tuple[Violation, ...]
    wall: float
    world: World

    def replay(self) -> str:
        return f"python -m bench.adversary --seed {self.seed} --hours {self.hours:g}"


def run(seed: int, hours: float, *, stop_at_first: bool = False) -> Outcome:
    """One seeded run: the world drawn, played for `hours` on virtual time, judged (`stop_at_first`:
    the run ends at its first counterexample, which is what a search needs; a replay goes on)."""
    began = time.perf_counter()
    world = adversary.draw(seed, hours)
    with fleet(adversary.specs_of(world, {}, {}, set()), market=market(world), typed=True) as f:
        play = Play(world, f)
        judge = Judge(play)
        judge.stop_at_first = stop_at_first
        play.judge = judge
        play.install()
        ticks = 0

        def each() -> None:
            nonlocal ticks
            ticks += 1
            judge.after_tick()
            play.step()

        with contextlib.suppress(Counterexample):
            f.advance(START + hours * H, each=each)
            judge.finish()
        rentals = len(f.rentals())
    return Outcome(
        seed,
        hours,
        ticks,
        judge.checks,
        rentals,
        tuple(sorted(judge.violations, key=lambda v: (v.at, v.invariant))),
        time.perf_counter() - began,
        world,
    )


def report(outcome: Outcome) -> str:
    """A failing seed: the replay command, then each invariant broken, when, and the ledger."""
    if not outcome.violations:
        return f"seed {outcome.seed}: no counterexample ({outcome.checks} checks)\n"
    lines = [f"COUNTEREXAMPLE seed {outcome.seed}: replay with `{outcome.replay()}`"]
    lines.append(f"  world: {outcome.world.describe()}")
    lines += ["  " + v.describe().replace("\n", "\n  ") for v in outcome.violations]
    return "\n".join(lines) + "\n"
