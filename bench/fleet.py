"""Money lost per failure class: four ending policies on the same seeded fleet (issue 9).

How to run (from the repository root)::

    .venv/bin/python bench/fleet.py              # 72 simulated hours, ~420 rentals (ray-vast)
    .venv/bin/python bench/fleet.py --seed 7     # another scenario
    .venv/bin/python bench/fleet.py --quick      # a tiny run (what the smoke test uses)

What it measures. For each policy (`bench.policies`), the policy's spec (`spec_for`) goes through
the engine of `ray-vast simulate` (`fleetsim.simulate`, with the scenario of `fleetsim.scenario`
and the mix of `fleetsim.mix`): one cluster on virtual time against an in-process vastsim with
every part of the engine real (`fleetsim.harness`: planner, listing checks, nets, money chain,
executor, ledger, the head's `HeadApp`), and every container of ours runs the agent's own state
machine (`fleetsim.agents`); failures are injected at the container's boundary or by vastsim.
This file holds only the benchmark: its scenario's sizes, its market, the policies' specs and the
table. Ray's demand is a seeded step curve, so the cluster rents, loses and replaces machines all
period long. Every rental draws a fate from a seeded mix, keyed by its rank (the k-th rental of
every policy gets the k-th fate), and orphans appear at seeded times:

- `stall`: provisioning stalls (the host never finishes loading: vastsim `never_boots`);
- `boot`: the container runs but the image's PID 1 never starts the agent (it never enrolls);
- `dies`: the worker's container loses its network while the instance keeps running: no
  heartbeat, no report and no self-destroy gets out, so only the head's side can end it (the
  agent gives up after 300 s and keeps trying to destroy itself, in vain);
- `net-drop`: the network path drops (vastsim takes the host `offline`, as the virtual-day test);
- `orphan`: an instance at vast with our label and no record here (a crash between create and
  save);
- `idle`: a worker whose job ended: it keeps heartbeating, quiet, and bills until something ends
  it. Every rental that does not fail ends its job this way; the `idle` fate has short jobs
  (minutes to an hour), `healthy` long ones (hours). Jobs have short quiet gaps, shorter than the
  stop timer, so clearing the money chain's timers is exercised all along. The money chain's
  stop keeps the disk (DESIGN.md 10): the worker bills storage until the destroy timer, unless
  Ray's demand comes back first, when the planner starts it again instead of renting. A worker
  started again takes the work whose demand started it: its instance begins a new stint, with a
  job drawn as a working rental's (`idle` or `healthy`, by the mix, from its own stream); each
  idle stretch is accounted on its own, from its job's end to its instance's next start.

Per failure class: the dollars vastsim's meter billed after the failure began (from the instance's
meter segments, to the run's end), the detection latency (failure start -> the instance's first
stop or destroy, from the meter), and the machines ended. Overall: false destroys (a machine
ended while nothing was wrong with it: still booting, or inside its job), leaks (a failed or idle
instance still billing at the end and not stopped; no failure begins in the last `drain_hours`,
longer than every window of every policy, so nothing still billing then is going to be ended),
the total waste, and the work delivered (busy worker-hours), so that a policy cannot look cheap
by doing less. (`ray-vast simulate` prints the same accounting, beside dollars by cause.)

The floor is the waste if every failure were caught at the earliest moment the default spec's
window allows, priced from the instance's own meter over that window (so an instance that bills
storage only while stalled or offline is floored at storage): a stall `min(pull limit,
provisioning deadline)` after its create, a failed start-up `enrollment_limit` after it first ran,
a dead worker or a dropped path `went_silent_after` after its last heartbeat, an orphan
`orphan_grace` after it was created, an idle worker stopped `idle_stop_after` after its job ended
and destroyed `idle_destroy_after` after that (storage in between). Each policy is held to the
floor of the failures it met. Cadences are not in the floor, so even a perfect policy sits above
1.

Scale. A 1,000-rental week does not fit in five minutes on two shared cores: the engine lists
vast every minute (in-process HTTP and parsing) and the agents heartbeat every 30 s, about 0.7 s
of CPU per simulated hour at 10-15 workers. So the full run is 72 hours with short jobs: about
360 failures and idle stretches under ray-vast from about 50 rentals (a worker stopped for quiet
is started again when demand returns, not rented anew; fewer under the others, whose dead
machines hold their slots), about 4 minutes for the four policies; `--hours` runs a longer one.
ray-vast's figures hold within a few percent across seeds; the other policies' ratios grow with
the period, because a leak bills until the run ends. The journal keeps typed records instead of
re-encoding the whole state at every save (`TypedJournal`; `--real-store` gives the same
figures, slower).

Determinism: the scenario comes from `random.Random` seeded by strings (`seed:rental:k`), time is
the simulator's virtual clock, iteration is sorted, and no figure reads the wall clock, so the
same seed prints the same dollars.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/fleet.py`: the repository root holds `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import composed
from bench.policies import POLICIES, Policy
from fleetsim.mix import FLEET_MIX, Fate, Mix
from fleetsim.report import minutes, times
from fleetsim.scenario import Config as SimConfig
from fleetsim.scenario import rng
from fleetsim.simulate import Result, simulate
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml
from vastsim import Market
from vastsim.generate import generate_machines
from vastsim.market import STANDARD_IMAGES

__all__ = ["FULL", "QUICK", "Config", "PolicyResult", "main", "run", "spec_for"]

CLUSTER = "fleet"
NODE_TYPE = "gpu"
IMAGE = "rayproject/ray:2.60.0-py311-cpu"
DISK_GB = 40


@dataclass(frozen=True)
class Config:
    """The benchmark's scenario: its period, Ray's demand, the failure mix and the market's size,
    all drawn from `seed`."""

    seed: int
    hours: float  # failures begin only in this period
    demand: tuple[int, int]  # the workers Ray wants: a step curve between these
    machines: int
    mix: Mix = FLEET_MIX
    drain_hours: float = 1.0  # then no demand and no new failure, so every window elapses
    # the fates of the first rentals, in order, before the mix draws the rest (the quick run's:
    # every failure class at least once, however few rentals the policy makes)
    first_fates: tuple[Fate, ...] = ()

    def scenario(self) -> SimConfig:
        """What the fleetsim engine runs."""
        return SimConfig(
            seed=self.seed,
            hours=self.hours,
            drain_hours=self.drain_hours,
            mix=self.mix,
            demand={(CLUSTER, NODE_TYPE): self.demand},
            first_fates=self.first_fates,
        )


FULL = Config(seed=1, hours=72.0, demand=(6, 16), machines=300)
QUICK = dataclasses.replace(
    FULL,
    hours=3.0,
    demand=(3, 5),
    machines=120,
    mix=dataclasses.replace(
        FLEET_MIX,
        orphans_per_day=16.0,
        long_job_hours=(1.0, 3.0),
        fail_after_hours=(0.1, 1.0),
        demand_step_hours=(0.5, 1.5),
    ),
    first_fates=(Fate.STALL, Fate.BOOT, Fate.DIES, Fate.NET_DROP, Fate.IDLE),
)


def market(config: Config) -> Market:
    """Single-GPU RTX 4090 machines (one rental per machine at a time) at seeded prices."""
    r = rng(config.scenario(), "market")
    machines = [
        dataclasses.replace(
            m,
            num_gpus=1,
            gpu_name="RTX 4090",
            gpu_ram_gb=24,
            dph_base=round(r.uniform(0.28, 0.55), 4),
        )
        for m in generate_machines(config.seed, config.machines)
    ]
    return Market(machines, images=STANDARD_IMAGES)


def spec_for(config: Config, policy: Policy) -> ClusterSpec:
    """The cluster, with the policy's overrides (spec defaults everywhere else)."""
    watchdogs = "".join(f"\n    {k}: {v}" for k, v in sorted(policy.watchdogs.items()))
    node_extra = "".join(f"\n      {k}: {v}" for k, v in sorted(policy.node_type.items()))
    text = spec_yaml(
        CLUSTER,
        f"""\
  max_dollars_per_hour: {config.demand[1] * 2}
  node_types:
    {NODE_TYPE}:
      min_workers: 0
      max_workers: {config.demand[1]}
      candidate_factor: 1
      image: {IMAGE}
      disk_gb: {DISK_GB}
      offer:
        filters: {{num_gpus: {{eq: 1}}, gpu_name: {{eq: RTX 4090}}}}
        min_reliability: 0.9{node_extra}
  watchdogs:{watchdogs or " {}"}
""",
    )
    loaded = load_texts([(f"{CLUSTER}.yaml", text)])
    if not loaded.ok:
        raise SystemExit("\n".join(d.summary for d in loaded.diagnostics))
    return loaded.clusters[0]


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolicyResult:
    """One policy's run: the engine's result under the policy's name."""

    policy: str
    result: Result


def run(config: Config, policy: Policy, *, real_store: bool = False) -> PolicyResult:
    """One policy through the whole scenario, on a fresh simulator and state (the floor's
    windows are the default spec's, whatever the policy)."""
    result = simulate(
        [spec_for(config, policy)],
        config.scenario(),
        offers=market(config),
        prepare=policy.apply,
        real_store=real_store,
    )
    return PolicyResult(policy.name, result)


# --- the table -------------------------------------------------------------------------------


HEADER = (
    f"{'policy':<14} {'class':<9} {'n':>4} {'ended':>5} {'p50':>7} {'p95':>7} {'max':>7} "
    f"{'$ after':>9} {'$ floor':>8} {'ratio':>8}"
)


def table(results: Sequence[PolicyResult]) -> str:
    """One table: a line per policy (all classes), then a line per failure class."""
    lines = [HEADER, "-" * len(HEADER)]
    for name, r in ((p.policy, p.result) for p in results):
        failures = sum(c.failures for c in r.classes)
        ended = sum(c.ended for c in r.classes)
        lines.append(
            f"{name:<14} {'ALL':<9} {failures:>4} {ended:>5} {'':>7} {'':>7} {'':>7} "
            f"{r.wasted:>9.2f} {r.floor:>8.2f} {times(r.ratio):>8}   "
            f"false destroys {sum(r.false_destroys.values())}, leaks {r.leaks} "
            f"({r.unrecorded_leaks} unrecorded, ${r.leak_dph:.2f}/h), rentals {r.rentals}, "
            f"work {r.worked_hours:.0f} h, billed ${r.billed:.2f}"
        )
        lines.extend(
            f"{'':<14} {c.fate.value:<9} {c.failures:>4} {c.ended:>5} "
            f"{minutes(c.latency[0]):>7} {minutes(c.latency[1]):>7} "
            f"{minutes(c.latency[2]):>7} {c.wasted:>9.2f} {c.floor:>8.2f} {times(c.ratio):>8}"
            for c in r.classes
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[PolicyResult]:
    """Run the policies on the same scenario, print the table, return the results."""
    args = _parser().parse_args(argv)
    config = dataclasses.replace(QUICK if args.quick else FULL, seed=args.seed)
    if args.hours is not None:
        config = dataclasses.replace(config, hours=args.hours)
    chosen = [p for p in POLICIES if not args.policy or p.name in args.policy]
    results = [run(config, p, real_store=args.real_store) for p in chosen]
    print(
        f"fleet: seed {config.seed}, failures for {config.hours:g} h then {config.drain_hours:g} h"
        f" of drain, demand {config.demand[0]}-{config.demand[1]} workers, "
        f"{config.scenario().step:g} s "
        "steps. '$ after': billed after each failure began (to the end of the run); "
        "latency: failure -> first stop or destroy; ratio: '$ after' / floor (every failure "
        "ended at the earliest moment the default spec's window allows)"
    )
    print(table(results))
    print("wall: " + ", ".join(f"{r.policy} {r.result.seconds:.1f}s" for r in results))
    if not args.quick:
        # the two classes only the composed controller shows (ray-vast's engine; issue 12)
        print(composed.report())
    return results


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=FULL.seed)
    parser.add_argument("--quick", action="store_true", help="a tiny run (the smoke test's)")
    parser.add_argument("--hours", type=float, help="the period in which failures begin")
    parser.add_argument(
        "--policy", action="append", help="run only this policy (repeatable)", default=[]
    )
    parser.add_argument(
        "--real-store",
        action="store_true",
        help="save through the real state store (slow; the figures are the same)",
    )
    return parser


if __name__ == "__main__":
    main(sys.argv[1:])
