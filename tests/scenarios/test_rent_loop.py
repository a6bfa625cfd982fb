"""An image that never enrolls on any host: the breaker stops the rent loop.

Finding 2 of issue 12: failed candidates were replaced at every reconcile and slots counted only
at the 30-minute provisioning deadline: 9 rentals in 4 minutes and no breaker; over 3 hours, 61
rentals and 59 good hosts blocklisted. The seed's breaker stops after 3 slots x 2 candidates.
"""

from __future__ import annotations

from fleetsim.agents import ContainerFault, Image
from fleetsim.harness import START, fleet
from tests.scenarios.world import (
    H,
    M,
    alive,
    cluster,
    dollars,
    in_windows,
    lines,
    rented,
    run,
    workers,
)

SPEC = cluster("broken", min_workers=1, factor=2)
PER_PAUSE = SPEC.breaker.slots * SPEC.node_types["gpu"].candidate_factor


def test_an_image_that_never_enrolls_rents_at_most_breaker_slots_times_factor_per_pause() -> None:
    broken = ContainerFault(image=Image.IDLES)  # PID 1 runs, never starts the agent
    with fleet(SPEC, faults=lambda vast_id: broken) as f:
        run(f, START + 1 * H)
        times = sorted(rented(f, "broken").values())
        # every 10 minutes of failure rent at most breaker slots x candidate factor
        windows = in_windows(times, START, START + 1 * H, 10 * M)
        assert max(windows) <= PER_PAUSE, windows
        assert len(times) <= 4 * PER_PAUSE  # one pause per ~15 min: 6 + 6 + 6 + 6 at most
        assert len(times) >= PER_PAUSE  # it did try
        # the breaker opened, and says why; each failed slot was counted when it failed
        opened = lines(f, "breaker_open")
        assert opened and all("slots in a row ended with no worker" in e["message"] for e in opened)
        counted = lines(f, "slots_no_worker")
        assert counted and all("ended with no worker" in e["message"] for e in counted)
        # every candidate ended by the enrollment limit, none lingered past it
        assert not workers(f, "broken")
        assert len(lines(f, "enrollment_timeout", "detection")) >= len(times) - PER_PAUSE
        assert len(alive(f, "broken")) <= PER_PAUSE
        pauses = [b for b in f.controller.records().breakers.values() if b.paused_until]
        assert pauses
        # the meter: every failed candidate billed for minutes (boot, the 60 s limit), not more
        most = max(f.sim.instance(v).compute_dph + f.sim.instance(v).storage_dph for v in rented(f))
        assert dollars(f, "broken") <= len(times) * most * (6 * M / H)


def test_a_healthy_enrollment_resets_the_count() -> None:
    """One bad host then good ones: the count goes back to 0 and nothing pauses."""
    first: list[int] = []

    def fault(vast_id: int) -> ContainerFault:
        if not first:
            first.append(vast_id)
            return ContainerFault(image=Image.IDLES)
        return ContainerFault()

    with fleet(cluster("mixed", min_workers=2, factor=1), faults=fault) as f:
        run(f, START + 30 * M)
        assert len(workers(f, "mixed")) == 2
        assert not lines(f, "breaker_open")
        state = f.controller.records().breakers.get("mixed/gpu")
        assert state is None or state.consecutive_empty == 0
