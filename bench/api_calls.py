"""vast.ai requests per watch tick, against the target (issue 9: "API calls per tick").

How to run (from the repository root)::

    .venv/bin/python bench/api_calls.py           # N = 10, 100, 1000 instances
    .venv/bin/python bench/api_calls.py --quick   # N = 10 and 30 (what the smoke test uses)

What it measures: how many HTTP requests the real watch controller sends to vast on a steady-state
tick, broken down by endpoint, next to the target `ceil(N / 25)` (the v1 listing's pages; vast
serves 25 instances a page) plus one request per action. A steady cluster takes no action, so its
target is the listing alone: any per-instance polling (a `show` per worker, a label check per
record) would show up here as N extra requests a tick.

Everything on the path is the real code, in one process, on virtual time:

- vastsim (`Sim` on a `VirtualClock`) holding a generated market of single-GPU machines;
- the real vast client (`client_from_settings`) over `InProcessTransport(sim)`, pacing off;
- the real `Controller` with a `Journal` over a `MemoryStore` and a `LedgerWriter` on a temp file,
  the `ImageLauncher`, and a clock whose `sleep` advances the simulator;
- one cluster with `min_workers = max_workers = N` and `candidate_factor: 1`. Up to N = 100
  (`--rent-up-to`) the controller rents it itself, tick after tick, from an empty state. Larger
  fleets are seeded (`seed`: the same creates and the records the executor would write), because
  the executor saves the whole state before and after every create, which makes renting 1,000
  machines one by one take many minutes; the table's `start` column says which was used.

Nothing in a vastsim container runs the agent, so this benchmark plays the agents' part: once a
candidate's container runs, it enrolls, and every worker heartbeats with a busy sample. Both go
through the head's own pure decisions (`head.enrollment.enroll`, `head.heartbeats.heartbeat`)
applied with `Controller.mutate`, as the head's service applies them; neither calls vast, so they
add nothing to the counts. When every worker is enrolled, the last reconcile acted on nothing and
vast lists exactly N running instances, the cluster is steady and the next reconcile ticks are
counted. Ticks between reconciles (the 30 s nets) are counted too: their target is 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.applying.journal import Journal
from reconciler.applying.launch import ImageLauncher
from reconciler.applying.search import offer_search
from reconciler.head import enrollment, heartbeats, tokens
from reconciler.head.decisions import Destroy, Refusal
from reconciler.head.messages import EnrollRequest, Heartbeat, RaySample
from reconciler.head.pki import WorkerIdentity
from reconciler.model.codec import encode
from reconciler.model.plan import ActionKind
from reconciler.model.records import (
    InstanceRecord,
    Intent,
    Phase,
    Records,
    Request,
    Role,
    Slot,
    label_for,
)
from reconciler.model.spec import ClusterSpec
from reconciler.planning.offers import storage_dph
from reconciler.spec.loader import load_texts
from reconciler.state.ledger import LedgerWriter
from reconciler.state.memory import MemoryStore
from reconciler.vast.client import VastClient
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings
from reconciler.watch.controller import Controller, TickReport
from vastsim import InProcessTransport, Market, Sim, Timing, VirtualClock
from vastsim.generate import generate_machines
from vastsim.market import STANDARD_IMAGES

API_KEY = "bench-api-key"
CLUSTER = "bench"
PAGE_SIZE = 25  # instances per page of vast's v1 listing
SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 30)
# Above this N the fleet is seeded instead of rented tick by tick (see `seed`): the executor saves
# the whole state two or three times per rent, so renting 1,000 machines one by one takes minutes.
RENT_UP_TO = 100
MEASURED_RECONCILES = 3
MAX_TICKS = 400
SEED = 9
START = 1_790_000_000.0
# Actions that are one vast request each when nothing goes wrong.
CALLING_ACTIONS = frozenset(
    {ActionKind.RENT, ActionKind.DESTROY, ActionKind.STOP, ActionKind.START}
)


def target(instances: int, actions: int = 0) -> int:
    """The issue's budget for one reconcile tick: the listing's pages plus one call per action."""
    return math.ceil(instances / PAGE_SIZE) + actions


# --- the world ---------------------------------------------------------------------------------


class SimClock:
    """`reconciler.clock.Clock` over the simulator's virtual clock: sleeping advances the sim,
    so instance life cycles move exactly as far as the controller waits."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.clock.now()

    def sleep(self, seconds: float) -> None:
        self.sim.advance(max(0.0, seconds))


def market(instances: int, seed: int = SEED) -> Market:
    """A generated market with enough single-GPU machines that N candidates of one request (at
    most one per machine) always find offers; about half of the generated machines fail our
    filters (unverified, too few direct ports, unreliable)."""
    machines = generate_machines(seed, instances * 3 + 60)
    return Market([dataclasses.replace(m, num_gpus=1) for m in machines], images=STANDARD_IMAGES)


def cluster_spec(instances: int) -> ClusterSpec:
    text = f"""\
apiVersion: ray-vast/v1
kind: Cluster
metadata: {{name: {CLUSTER}}}
spec:
  max_dollars_per_hour: {instances * 5}
  node_types:
    gpu:
      min_workers: {instances}
      max_workers: {instances}
      candidate_factor: 1
      offer:
        filters: {{num_gpus: {{eq: 1}}}}
        min_reliability: 0.9
      image: rayproject/ray:2.60.0-py311-cpu
      disk_gb: 20
"""
    loaded = load_texts([(f"{CLUSTER}.yaml", text)])
    if not loaded.ok:
        raise SystemExit("\n".join(d.summary for d in loaded.diagnostics))
    return loaded.clusters[0]


@dataclass
class Agents:
    """The agents in the rented containers: enroll once running, then heartbeat, busy."""

    controller: Controller
    sim: Sim
    serial: int = 1
    seq: int = 0

    def act(self) -> None:
        running = {
            i.id: i.public_ip for i in self.sim.instances.values() if i.actual_status == "running"
        }
        self.controller.mutate(lambda records, now: self._enroll(records, now, running))
        self.controller.mutate(lambda records, now: self._beat(records, now, running))

    def _enroll(self, records: Records, now: float, running: Mapping[int, str]) -> Records:
        spec = self.controller.specs[CLUSTER]
        lineage = self.controller.journal.lineage
        for record in list(records.instances.values()):
            if not _waiting(record, running):
                continue
            token = tokens.mint()
            window = tokens.enrollment_window(spec, spec.node_types[record.node_type])
            records = tokens.with_token(
                records,
                tokens.join_token(
                    token, cluster=CLUSTER, record_id=record.id, now=now, window=window
                ),
            )
            vast_id = record.vast_id or 0
            request = EnrollRequest(
                token=token,
                instance_id=vast_id,
                boot_id=f"boot-{vast_id}",
                public_ip=running[vast_id],
                ports={},
                cpus=8,
                gpus=1,
            )
            self.serial += 1
            decision = enrollment.enroll(
                records, request, cluster=CLUSTER, lineage=lineage, now=now, serial=self.serial
            )
            _accepted(decision.refusal, decision.destroys, f"enrollment of {record.id}")
            records = decision.records
        return records

    def _beat(self, records: Records, now: float, running: Mapping[int, str]) -> Records:
        lineage = self.controller.journal.lineage
        for record in list(records.instances.values()):
            vast_id = record.vast_id
            if vast_id is None or vast_id not in running or not _working(record):
                continue
            self.seq += 1
            identity = WorkerIdentity(CLUSTER, record.id, vast_id, record.slot_id or "", serial=1)
            decision = heartbeats.heartbeat(
                records,
                identity,
                _busy_beat(record, self.seq, now),
                cluster=CLUSTER,
                lineage=lineage,
                now=now,
            )
            _accepted(decision.refusal, decision.destroys, f"heartbeat of {record.id}")
            records = decision.records
        return records


def _accepted(refusal: Refusal | None, destroys: Sequence[Destroy], what: str) -> None:
    """A healthy fleet is never refused and never loses a machine to the head; if it did, the
    counts below would be of a broken cluster, so the benchmark stops and says why."""
    if refusal is not None:
        raise RuntimeError(f"the head refused the {what}: {refusal.error}: {refusal.message}")
    if destroys:
        raise RuntimeError(f"the {what} ended {len(destroys)} machine(s)")


def _waiting(record: InstanceRecord, running: Mapping[int, str]) -> bool:
    """A live candidate whose container runs: its agent enrolls now."""
    return (
        record.role is Role.CANDIDATE
        and record.live
        and record.intent is Intent.RUNNING
        and record.vast_id in running
    )


def _working(record: InstanceRecord) -> bool:
    """A live worker: its agent heartbeats."""
    return record.role is Role.WORKER and record.live and record.intent is Intent.RUNNING


def _busy_beat(record: InstanceRecord, seq: int, now: float) -> Heartbeat:
    """A heartbeat from a worker that is doing work (so the idle nets leave it alone)."""
    return Heartbeat(
        instance_id=record.vast_id or 0,
        record_id=record.id,
        boot_id=f"boot-{record.vast_id}",
        seq=seq,
        sent_at=now,
        ray=RaySample("running", 4242, None, 60.0),
        pids=120,
        pids_limit=None,
        worker_ports_in_use=(),
        worker_ports_total=100,
        sample_seconds=30.0,
        cpu_fraction=0.7,
        load1=4.0,
        memory_used_fraction=0.4,
        net_rx_bytes=10_000_000,
        net_tx_bytes=1_000_000,
        gpu_fraction=0.9,
        received_at=now,
    )


@dataclass
class World:
    sim: Sim
    clock: SimClock
    client: VastClient
    controller: Controller
    agents: Agents
    instances: int


@contextlib.contextmanager
def world(instances: int) -> Iterator[World]:
    """The simulator, the client and the controller for one N; everything closed afterwards.

    The ledger lives in /dev/shm when there is one: every ledger line is fsynced, and disk
    flushes would only make the ramp-up slower without changing a single request count."""
    shm = Path("/dev/shm")
    with (
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp,
        Sim(
            market=market(instances),
            clock=VirtualClock(START),
            api_key=API_KEY,
            timing=Timing.instant(),
        ) as sim,
    ):
        clock = SimClock(sim)
        store = MemoryStore(clock=clock, secrets=(API_KEY,))
        store.lock("watch")
        snapshot = store.write(encode(Records()), based_on=None)
        env = {"VAST_API_KEY": API_KEY, "VAST_URL": "http://vastsim"}
        with (
            LedgerWriter.open(
                Path(tmp) / "ledger.jsonl", clock=clock, secrets=(API_KEY,)
            ) as ledger,
            client_from_settings(
                env=env,
                spec_url=None,
                clock=clock,
                transport=InProcessTransport(sim),
                settings=ClientSettings(pacing=False),
            ) as client,
        ):
            controller = Controller(
                specs={CLUSTER: cluster_spec(instances)},
                journal=Journal(store, ledger, snapshot),
                provider=client,
                launcher=ImageLauncher(),
                clock=clock,
            )
            yield World(sim, clock, client, controller, Agents(controller, sim), instances)


# --- seeding a large fleet ----------------------------------------------------------------------


def seed(w: World) -> None:
    """Rent N instances and write the records the executor would have written for them.

    This stands in for the executor's rent loop only: the creates are real (the vast client,
    the launcher's create request, the label that marks them ours), and the records are what
    `Executor._try_create` leaves behind, candidates of one open request placed as the scaling
    step places it. Enrollment, refresh, the nets and every later tick are the real code paths.
    """
    spec = w.controller.specs[CLUSTER]
    node_type = spec.node_types["gpu"]
    lineage = w.controller.journal.lineage
    now = w.clock.now()
    request_id = "q1"
    records: dict[str, InstanceRecord] = {}
    while len(records) < w.instances:
        offers = w.client.search_offers(offer_search(node_type))
        if not offers:
            raise SystemExit(f"N={w.instances}: the market ran out after {len(records)} rentals")
        for offer in offers[: w.instances - len(records)]:
            ident = f"i{len(records) + 2}"
            record = InstanceRecord(
                id=ident,
                cluster=CLUSTER,
                node_type=node_type.name,
                managed_by=lineage,
                label=label_for(CLUSTER, lineage, ident),
                role=Role.CANDIDATE,
                intent=Intent.RUNNING,
                phase=Phase.RENTING,
                created_at=now,
                offer_id=offer.id,
                machine_id=offer.machine_id,
                host_id=offer.host_id,
                dph_total=offer.dph_total,
                storage_dph=storage_dph(offer, node_type.disk_gb),
                request_id=request_id,
            )
            create = ImageLauncher().create_request(spec, node_type, record, bid=None)
            created = w.client.create_instance(offer.id, create)
            records[ident] = dataclasses.replace(record, vast_id=created.instance_id)
    request = Request(
        id=request_id,
        cluster=CLUSTER,
        node_type=node_type.name,
        managed_by=lineage,
        placed_at=now,
        provision_deadline=now + spec.watchdogs.provision_deadline_seconds,
        slots=tuple(Slot(f"{request_id}s{i}") for i in range(1, w.instances + 1)),
        dispatched_at=now,
    )
    w.controller.mutate(
        lambda current, _now: dataclasses.replace(
            current,
            instances={**current.instances, **records},
            requests={**current.requests, request_id: request},
            next_id=w.instances + 2,
        )
    )


# --- ticking and counting ----------------------------------------------------------------------


@dataclass
class Tick:
    """What one controller tick sent to vast."""

    reconciled: bool
    actions: int
    routes: Counter[str] = field(default_factory=Counter)  # as vastsim logged them
    operations: Counter[str] = field(default_factory=Counter)  # as the client counted them

    @property
    def requests(self) -> int:
        return sum(self.routes.values())


def tick(w: World) -> Tick:
    """One controller tick, its requests counted on both sides; then the agents act and the
    clock moves to the next due job, as `Controller.run` would wait."""
    logged = len(w.sim.requests)
    before = Counter(w.client.counters)
    report = w.controller.tick()
    routes = Counter(r.route for r in list(w.sim.requests)[logged:])
    after = Counter(w.client.counters)
    operations = Counter({f"{op}:{outcome}": n for (op, outcome), n in (after - before).items()})
    result = Tick(_reconciled(report), _calling_actions(report), routes, operations)
    w.agents.act()
    w.clock.sleep(_next_due(w.controller))
    return result


def _reconciled(report: TickReport) -> bool:
    return any("reconcile" in jobs for jobs in report.jobs.values())


def _calling_actions(report: TickReport) -> int:
    return sum(
        1
        for result in report.results
        for action in [*result.done, *(a for a, _ in result.failed)]
        if action.kind in CALLING_ACTIONS
    )


def _next_due(controller: Controller) -> float:
    now = controller.clock.now()
    return max(0.5, min(s.next_due(now) for s in controller.schedules.values()))


def steady(w: World, last: Tick) -> bool:
    """N enrolled workers, no candidate left, N running instances listed, and a reconcile that
    found nothing to do."""
    live = [r for r in w.controller.records().instances.values() if r.live]
    workers = [r for r in live if r.role is Role.WORKER and r.intent is Intent.RUNNING]
    running = [i for i in w.sim.instances.values() if i.actual_status == "running"]
    return (
        last.reconciled
        and last.actions == 0
        and len(workers) == len(live) == w.instances
        and len(running) == len(w.sim.instances) == w.instances
    )


def ramp_up(w: World) -> int:
    """Tick from an empty state until the cluster is steady; returns the ticks it took."""
    for count in range(1, MAX_TICKS + 1):
        if steady(w, tick(w)):
            return count
    raise SystemExit(f"N={w.instances}: not steady after {MAX_TICKS} ticks")


@dataclass(frozen=True)
class Row:
    instances: int
    start: str  # "rented": by the controller from an empty state; "seeded": see `seed`
    target: int
    reconcile_ticks: tuple[Tick, ...]
    other_ticks: tuple[Tick, ...]
    ramp_ticks: int
    seconds: float

    @property
    def per_reconcile(self) -> int:
        """The most requests any measured reconcile tick sent (they should all be equal)."""
        return max(t.requests for t in self.reconcile_ticks)

    @property
    def per_other(self) -> int:
        return max((t.requests for t in self.other_ticks), default=0)

    @property
    def routes(self) -> Counter[str]:
        return max(self.reconcile_ticks, key=lambda t: t.requests).routes

    @property
    def operations(self) -> Counter[str]:
        return max(self.reconcile_ticks, key=lambda t: t.requests).operations

    @property
    def on_target(self) -> bool:
        return all(t.requests == target(self.instances, t.actions) for t in self.reconcile_ticks)


def measure(instances: int, *, rent: bool, reconciles: int = MEASURED_RECONCILES) -> Row:
    start = time.perf_counter()
    with world(instances) as w:
        if not rent:
            seed(w)
        ramp = ramp_up(w)
        counted: list[Tick] = []
        while sum(t.reconciled for t in counted) < reconciles:
            counted.append(tick(w))
    return Row(
        instances=instances,
        start="rented" if rent else "seeded",
        target=target(instances),
        reconcile_ticks=tuple(t for t in counted if t.reconciled),
        other_ticks=tuple(t for t in counted if not t.reconciled),
        ramp_ticks=ramp,
        seconds=time.perf_counter() - start,
    )


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'N':>5}  {'start':>6}  {'target':>6}  {'measured':>8}  {'ok':>3}  {'nets-only':>9}  "
        f"{'ramp':>5}  {'wall':>6}  by endpoint (vastsim) | by operation (client)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        routes = ", ".join(f"{route} x{n}" for route, n in sorted(r.routes.items()))
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r.operations.items()))
        lines.append(
            f"{r.instances:>5}  {r.start:>6}  {r.target:>6}  {r.per_reconcile:>8}  "
            f"{'yes' if r.on_target else 'NO':>3}  {r.per_other:>9}  {r.ramp_ticks:>5}  "
            f"{r.seconds:>5.1f}s  {routes} | {ops}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmark, print its table and return its rows (the smoke test reads them)."""
    args = _parser().parse_args(argv)
    sizes = QUICK_SIZES if args.quick else tuple(args.sizes or SIZES)
    rows = [measure(n, rent=n <= args.rent_up_to) for n in sizes]
    print(
        "api_calls: vast requests per steady-state watch tick "
        f"(target = ceil(N/{PAGE_SIZE}) listing pages + actions; {MEASURED_RECONCILES} reconcile "
        "ticks measured; 'nets-only': ticks between reconciles, target 0; 'ramp': ticks from "
        "an empty state to steady)"
    )
    print(table(rows))
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10 and 30 only")
    parser.add_argument("--sizes", type=int, nargs="*", help=f"instance counts (default {SIZES})")
    parser.add_argument(
        "--rent-up-to",
        type=int,
        default=RENT_UP_TO,
        help="the controller rents fleets up to this N itself; larger ones are seeded",
    )
    return parser


if __name__ == "__main__":
    main(sys.argv[1:])
