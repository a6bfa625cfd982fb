"""The seeded adversary (DESIGN.md 11, "Safety is searched for, not only listed").

The same seed draws the same world, and the invariant checkers catch violations planted in a
synthetic story (a healthy worker destroyed, a canary cycle renting past its bound). The seeds
themselves run in the slow lane (tests/bench/test_adversary.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from fleetsim import adversary, checks
from fleetsim.harness import START
from fleetsim.invariants import Judge
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role


def test_the_same_seed_draws_the_same_world_and_seeds_differ() -> None:
    assert adversary.draw(11, 6.0) == adversary.draw(11, 6.0)
    worlds = {adversary.draw(seed, 6.0).describe() for seed in range(1, 21)}
    assert len(worlds) == 20
    first = adversary.draw(11, 6.0)
    fault, work = adversary.container_fault(first, 20000007, START)
    again, work_again = adversary.container_fault(first, 20000007, START)
    assert (fault.image, fault.head_unreachable, work.changes) == (
        again.image,
        again.head_unreachable,
        work_again.changes,
    )


def test_a_drawn_world_loads_through_the_real_loader() -> None:
    for seed in range(1, 30):
        world = adversary.draw(seed, 6.0)
        specs = adversary.specs_of(world, {}, {}, set())
        assert [s.name for s in specs] == [c.name for c in world.clusters]


@dataclass
class FakePlay:
    """What the judge reads of a play, with nothing broken by the world."""

    fleet: Any = field(
        default_factory=lambda: SimpleNamespace(controller=SimpleNamespace(specs={}))
    )
    works: dict[int, Any] = field(default_factory=dict)
    bounds: dict[tuple[str, str], int] = field(default_factory=dict)

    def faulted(self, vast_id: int, at: float) -> str | None:
        return None

    def bound(self, key: tuple[str, str]) -> int | None:
        return self.bounds.get(key)


def _worker(vast_id: int) -> InstanceRecord:
    return InstanceRecord(
        id="i1",
        cluster="c1",
        node_type="gpu",
        managed_by="lineage",
        label="rv.c1.lineage.i1",
        role=Role.WORKER,
        intent=Intent.RUNNING,
        phase=Phase.SERVING,
        created_at=START,
        offer_id=1,
        machine_id=1,
        host_id=1,
        dph_total=0.1,
        vast_id=vast_id,
        enrolled_at=START + 20,
    )


def test_a_healthy_worker_destroyed_is_caught_with_its_ledger_lines() -> None:
    judge = Judge(FakePlay())  # type: ignore[arg-type]
    judge.prev = Records(instances={"i1": _worker(7)})
    judge.story.enrolled[7] = ((START + 20, 3.0), ("c1", "gpu"))
    destroy = {
        "time": START + 900,
        "seq": 9,
        "kind": "decision",
        "class": "went_silent",
        "record": "i1",
        "instance": 7,
        "message": "destroy: no report for 300s",
        "data": {"action": "destroy"},
    }
    judge.story.entries.append(destroy)
    judge.story.cause[7] = destroy
    checks.ended(judge, 7, START + 900, judge.prev)
    [found] = judge.violations
    assert found.invariant == 2
    assert "went_silent" in found.what
    assert any("went_silent" in line for line in found.lines)


def test_a_healthy_worker_scaled_down_below_max_workers_is_caught_and_idle_one_is_not() -> None:
    judge = Judge(FakePlay())  # type: ignore[arg-type]
    judge.prev = Records(instances={"i1": _worker(7)})
    judge.story.enrolled[7] = ((START + 20, 3.0), ("c1", "gpu"))
    judge.story.cause[7] = {"class": "removed_from_spec", "message": "", "time": START + 60}
    checks.ended(judge, 7, START + 60, judge.prev)
    assert [v.invariant for v in judge.violations] == [2]  # the spec was never removed
    judge.story.removed["c1"] = START + 30
    judge.violations.clear()
    judge._flagged.clear()
    checks.ended(judge, 7, START + 60, judge.prev)
    assert judge.violations == []


def test_a_canary_cycle_renting_past_its_bound_is_caught_and_an_enrollment_resets_it() -> None:
    play = FakePlay(bounds={("c1", "gpu"): 2})
    judge = Judge(play)  # type: ignore[arg-type]
    judge.story.rentals[("c1", "gpu")] = [
        ((START + k, float(k)), f"i{k}", None) for k in range(1, 4)
    ]
    checks.canary(judge, START + 100, final=True)
    [found] = judge.violations
    assert found.invariant == 1 and "rented 3" in found.what
    healthy = Judge(play)  # type: ignore[arg-type]
    healthy.story.rentals = judge.story.rentals
    healthy.story.enrolled[5] = ((START + 1.5, 1.5), ("c1", "gpu"))  # up, so it may serve
    checks.canary(healthy, START + 100, final=True)
    assert healthy.violations == []


def test_a_worker_enrolled_before_an_opening_that_serves_on_ends_the_canary_cycle() -> None:
    """Seed 107: a worker enrolled at +680 s; another died short and the breaker opened at
    +1,130 s; the first served on (600 s at +1,280 s), which proves the configuration, so the
    controller lifted the canary; the rentals after that are the healthy regime. The judge cut
    the cycle only at enrollments, so it counted them into the opening's canary cycle."""
    key = ("c1", "big")
    play = FakePlay(bounds={key: 3})
    judge = Judge(play)  # type: ignore[arg-type]
    judge.story.enrolled[13] = ((START + 680, 1.0), key)  # up all along: it served
    judge.story.openings[key] = [(START + 1130, 2.0)]
    judge.story.rentals[key] = [((START + 5100 + k, 3.0 + k), f"i{k}", None) for k in range(6)]
    checks.canary(judge, START + 5200, final=True)
    assert judge.violations == []
    # a cycle whose only older worker dies short, before its proof, is still a canary cycle
    judge = Judge(play)  # type: ignore[arg-type]
    judge.story.enrolled[13] = ((START + 680, 1.0), key)
    judge.story.ended[13] = START + 1200  # 520 s after enrolling: short
    judge.story.openings[key] = [(START + 1130, 2.0)]
    judge.story.rentals[key] = [((START + 5100 + k, 3.0 + k), f"i{k}", None) for k in range(6)]
    checks.canary(judge, START + 5200, final=True)
    [found] = judge.violations
    assert found.invariant == 1 and "rented 6" in found.what
