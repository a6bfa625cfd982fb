"""vast.ai requests per watch tick, against the target (issue 9: "API calls per tick").

How to run (from the repository root)::

    .venv/bin/python bench/api_calls.py           # N = 10, 100, 1000 workers
    .venv/bin/python bench/api_calls.py --quick   # N = 10 and 30 (what the smoke test uses)

What it measures: how many HTTP requests vast receives on a steady cluster's reconcile tick,
broken down by endpoint, next to the target `ceil(N / 25)` (the v1 listing's pages; vast serves
25 instances a page) plus one request per action. A steady cluster takes no action, so its
target is the listing alone: any per-instance polling (a `show` per worker, a label check per
record) would show up here as N extra requests a tick. The ticks between reconciles (the machine
nets, every 30 s) are counted too: their target is 0. And how often the steady cluster is
listed: the controller lists at its reconcile cadence and also at the earliest deadline any
record holds (`Controller.next_wakeup`, `reconciler/planning/deadlines.py`), so a cluster counts
as steady only once no record holds such a deadline; from then on the listings come at the
reconcile cadence alone (the `every` column: virtual seconds between the measured reconciles),
and `measured` per `every` seconds is the whole steady cost.

Everything on the path is the real code, in one process, on virtual time (`fleetsim.harness.fleet`):
vastsim on a `VirtualClock` with a generated market of single-GPU machines (`Timing.instant()`: no
provisioning delays, though an image pull still takes its size over the host's speed); the real
vast client over `InProcessTransport`, pacing off; the real `Controller` (planner, nets, executor,
ledger) and the cluster's real head (`HeadApp`), whose launcher puts the bootloader and a join
token into every create; and in every container the agent's own state machine (`fleetsim.agents`),
which enrolls at the head and heartbeats (busy: the node has work, so the idle nets leave it
alone). Nothing plays an agent and nothing is seeded: the controller rents the whole fleet itself
from an empty state (one cluster, `min_workers = max_workers = N`, `candidate_factor: 1`; one
offer search per reconcile, at most 100 offers, so N = 1,000 takes ten reconciles), and each
worker is one of its own agent's enrollments. The ramp-up's requests are printed below the table
(one create per worker, no destroy).

One part is lighter than production, as in `bench/fleet.py`: the controller's journal keeps the
typed records instead of re-encoding the whole state into the store at every save
(`fleetsim.harness.TypedJournal`). Every heartbeat is a save, and re-encoding a 1,000-record state
1,000 times every 30 virtual seconds would take minutes per simulated minute (N = 100 already
takes 26 s instead of 0.6 s); the store never talks to vast, so no count changes (`--real-store`
runs the real one and prints the same counts).

A tick's requests are everything vast received from the start of one controller tick to the start
of the next: the tick itself, then whatever the heads and the agents did until the controller
woke again (at `Controller.next_wakeup`, as the runner waits). The agents call vast only to
destroy themselves, so on a healthy fleet that part is empty; if it were not, it would show.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/api_calls.py`: the root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleetsim.harness import Fleet, fleet
from reconciler.model.plan import ActionKind
from reconciler.model.records import Intent, Role
from reconciler.model.spec import ClusterSpec
from reconciler.planning import deadlines
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml
from reconciler.watch.controller import TickReport
from vastsim import Market, Timing
from vastsim.generate import generate_machines
from vastsim.market import STANDARD_IMAGES

CLUSTER = "bench"
PAGE_SIZE = 25  # instances per page of vast's v1 listing
SIZES = (10, 100, 1000)
QUICK_SIZES = (10, 30)
MEASURED_RECONCILES = 3
MAX_TICKS = 400
SEED = 9
# Actions that are one vast request each when nothing goes wrong.
CALLING_ACTIONS = frozenset(
    {ActionKind.RENT, ActionKind.DESTROY, ActionKind.STOP, ActionKind.START}
)


def target(instances: int, actions: int = 0) -> int:
    """The issue's budget for one reconcile tick: the listing's pages plus one call per action."""
    return math.ceil(instances / PAGE_SIZE) + actions


# --- the world ---------------------------------------------------------------------------------


def market(instances: int, seed: int = SEED) -> Market:
    """A generated market with enough single-GPU machines that N candidates of one request (at
    most one per machine) always find offers; about half of the generated machines fail our
    filters (unverified, too few direct ports, unreliable)."""
    machines = generate_machines(seed, instances * 3 + 60)
    return Market([dataclasses.replace(m, num_gpus=1) for m in machines], images=STANDARD_IMAGES)


def cluster_spec(instances: int) -> ClusterSpec:
    text = spec_yaml(
        CLUSTER,
        f"""\
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
""",
    )
    loaded = load_texts([(f"{CLUSTER}.yaml", text)])
    if not loaded.ok:
        raise SystemExit("\n".join(d.summary for d in loaded.diagnostics))
    return loaded.clusters[0]


@contextlib.contextmanager
def world(instances: int, *, real_store: bool = False) -> Iterator[Fleet]:
    """The harness's fleet for one N (every node busy), torn down afterwards.

    The harness keeps its ledger in a temporary directory and fsyncs every line; it goes to
    /dev/shm when there is one, where that costs no disk flush (and changes no count)."""
    old = tempfile.tempdir
    if Path("/dev/shm").is_dir():
        tempfile.tempdir = "/dev/shm"
    try:
        with fleet(
            cluster_spec(instances),
            market=market(instances),
            timing=Timing.instant(),
            working=lambda now: True,
            typed=not real_store,
        ) as f:
            yield f
    finally:
        tempfile.tempdir = old


# --- ticking and counting ----------------------------------------------------------------------


@dataclass
class Tick:
    """What vast received from the start of one controller tick to the start of the next."""

    at: float  # virtual time of the controller's tick
    reconciled: bool
    actions: int
    routes: Counter[str] = field(default_factory=Counter)  # as vastsim logged them
    operations: Counter[str] = field(default_factory=Counter)  # as the client counted them

    @property
    def requests(self) -> int:
        return sum(self.routes.values())


def tick(f: Fleet) -> Tick:
    """One controller tick, as `Fleet.tick` runs it but keeping the controller's report; then
    the clock moves to the controller's next wakeup (as the runner waits), the agents
    acting at their own moments on the way. Requests are counted on both sides: vastsim's log
    (everyone's) and the controller's client (its own)."""
    logged = len(f.sim.requests)
    before = Counter(f.client.counters)
    at = f.clock.now()
    with f.agents.turn():
        report = f.controller.tick()
    f.sim.step()
    f.clock.sleep(max(0.5, f.controller.next_wakeup(f.clock.now())))
    routes = Counter(r.route for r in list(f.sim.requests)[logged:])
    after = Counter(f.client.counters)
    operations = Counter({f"{op}:{outcome}": n for (op, outcome), n in (after - before).items()})
    return Tick(at, _reconciled(report), _calling_actions(report), routes, operations)


def _reconciled(report: TickReport) -> bool:
    return any("reconcile" in jobs for jobs in report.jobs.values())


def _calling_actions(report: TickReport) -> int:
    return sum(
        1
        for result in report.results
        for action in [*result.done, *(a for a, _ in result.failed)]
        if action.kind in CALLING_ACTIONS
    )


def steady(f: Fleet, last: Tick, instances: int) -> bool:
    """N workers enrolled by their agents, no candidate left, N running instances at vast, a
    reconcile that found nothing to do, and no record holding a deadline that would list early."""
    records = f.controller.records()
    live = [r for r in records.instances.values() if r.live]
    workers = [r for r in live if r.role is Role.WORKER and r.intent is Intent.RUNNING]
    agents = [f.agent(r.vast_id) for r in workers if r.vast_id is not None]
    running = [i for i in f.sim.instances.values() if i.actual_status == "running"]
    early = deadlines.next_listing(
        records.instances.values(),
        records.requests.values(),
        f.controller.specs[CLUSTER],
        after=float("-inf"),
    )
    return (
        last.reconciled
        and last.actions == 0
        and early is None
        and len(workers) == len(live) == instances
        and all(a is not None and a.phase == "worker" for a in agents)
        and len(running) == len(f.sim.instances) == instances
    )


@dataclass(frozen=True)
class Ramp:
    ticks: int
    at: float  # virtual time of the reconcile that found the cluster steady
    routes: Counter[str]  # every request vast received on the way, by endpoint


def ramp_up(f: Fleet, instances: int) -> Ramp:
    """Tick from an empty state until the cluster is steady."""
    routes: Counter[str] = Counter()
    for count in range(1, MAX_TICKS + 1):
        last = tick(f)
        routes += last.routes
        if steady(f, last, instances):
            return Ramp(count, last.at, routes)
    raise SystemExit(f"N={instances}: not steady after {MAX_TICKS} ticks")


@dataclass(frozen=True)
class Row:
    instances: int
    target: int
    reconcile_ticks: tuple[Tick, ...]
    other_ticks: tuple[Tick, ...]
    ramp: Ramp
    seconds: float

    @property
    def per_reconcile(self) -> int:
        """The most requests any measured reconcile tick sent (they should all be equal)."""
        return max(t.requests for t in self.reconcile_ticks)

    @property
    def per_other(self) -> int:
        return max((t.requests for t in self.other_ticks), default=0)

    @property
    def every(self) -> float:
        """The shortest virtual time between two listings of the steady cluster (from the
        reconcile that found it steady): the reconcile cadence, unless something listed early."""
        times = [self.ramp.at, *(t.at for t in self.reconcile_ticks)]
        return min(b - a for a, b in itertools.pairwise(times))

    @property
    def routes(self) -> Counter[str]:
        return max(self.reconcile_ticks, key=lambda t: t.requests).routes

    @property
    def operations(self) -> Counter[str]:
        return max(self.reconcile_ticks, key=lambda t: t.requests).operations

    @property
    def on_target(self) -> bool:
        return all(t.requests == target(self.instances, t.actions) for t in self.reconcile_ticks)


def measure(
    instances: int, *, reconciles: int = MEASURED_RECONCILES, real_store: bool = False
) -> Row:
    start = time.perf_counter()
    with world(instances, real_store=real_store) as f:
        ramp = ramp_up(f, instances)
        counted: list[Tick] = []
        while sum(t.reconciled for t in counted) < reconciles:
            counted.append(tick(f))
        seconds = time.perf_counter() - start  # the fleet's teardown is not the benchmark's
    return Row(
        instances=instances,
        target=target(instances),
        reconcile_ticks=tuple(t for t in counted if t.reconciled),
        other_ticks=tuple(t for t in counted if not t.reconciled),
        ramp=ramp,
        seconds=seconds,
    )


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'N':>5}  {'target':>6}  {'measured':>8}  {'ok':>3}  {'every':>5}  {'nets-only':>9}  "
        f"{'ramp':>4}  {'wall':>6}  by endpoint (vastsim) | by operation (client)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        routes = ", ".join(f"{route} x{n}" for route, n in sorted(r.routes.items()))
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(r.operations.items()))
        lines.append(
            f"{r.instances:>5}  {r.target:>6}  {r.per_reconcile:>8}  "
            f"{'yes' if r.on_target else 'NO':>3}  {r.every:>4.0f}s  {r.per_other:>9}  "
            f"{r.ramp.ticks:>4}  {r.seconds:>5.1f}s  {routes} | {ops}"
        )
    lines.append("ramp-up, from an empty state to steady, every request vast received:")
    for r in rows:
        routes = ", ".join(f"{route} x{n}" for route, n in sorted(r.ramp.routes.items()))
        lines.append(f"{r.instances:>5}  {routes}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmark, print its table and return its rows (the smoke test reads them)."""
    args = _parser().parse_args(argv)
    sizes = QUICK_SIZES if args.quick else tuple(args.sizes or SIZES)
    rows = [measure(n, real_store=args.real_store) for n in sizes]
    print(
        "api_calls: vast requests per steady-state reconcile tick, real agents in every "
        f"container (target = ceil(N/{PAGE_SIZE}) listing pages + actions; "
        f"{MEASURED_RECONCILES} reconcile ticks measured; 'every': virtual seconds between "
        "them; 'nets-only': ticks between reconciles, target 0; 'ramp': ticks from an empty "
        "state to steady)"
    )
    print(table(rows))
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10 and 30 only")
    parser.add_argument("--sizes", type=int, nargs="*", help=f"worker counts (default {SIZES})")
    parser.add_argument(
        "--real-store",
        action="store_true",
        help="save through the real state store (slow above N = 100; the counts are the same)",
    )
    return parser


if __name__ == "__main__":
    main(sys.argv[1:])
