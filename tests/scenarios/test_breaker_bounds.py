"""Rentals stay bounded whatever the fault (issue 21, points 1-3; DESIGN.md 11), the whole
controller on virtual time.

What the old controller did, and what each test fails on there:
1. The breaker unblocked the hosts of its streak when it opened: with the cheapest hosts the
   broken ones, they were rented again after every pause (factor 1, three cheap hosts whose
   creates fail: 42 rentals in 3 hours, no worker ever).
2. The breaker bounded a streak only once it had begun: a never-enrolling image with
   `min_workers: 8` rented 16 every cycle.
3. Workers that enroll and then die were never counted: an image without `ray` rented 240 an
   hour, and a Ray head that is down never stopped the renting.
"""

from __future__ import annotations

from itertools import pairwise

from fleetsim.agents import HEALTHY, ContainerFault, Image, Span
from fleetsim.harness import START, Fleet, fleet
from reconciler.applying.search import offer_search
from reconciler.planning.offers import unfit_reason
from tests.scenarios.world import (
    IMAGE,
    H,
    M,
    Signals,
    cluster,
    ledger,
    lines,
    rented,
    run,
    workers,
)

BROKEN = "rayproject/ray:2.60.0-py311-noray"


def cheapest_hosts(f: Fleet, name: str, count: int) -> dict[int, int]:
    """The machines of the `count` cheapest acceptable hosts (one machine each), by host."""
    node_type = f.controller.specs[name].node_types["gpu"]
    found: dict[int, int] = {}
    for offer in f.client.search_offers(offer_search(node_type)):
        if unfit_reason(offer, node_type) is None and offer.host_id not in found:
            found[offer.host_id] = offer.machine_id
        if len(found) == count:
            break
    return found


def hosts_rented(f: Fleet, name: str) -> list[int]:
    return [f.sim.instance(v).machine.host_id for v in rented(f, name)]


def rented_after_blocklisting(f: Fleet, name: str, hosts: dict[int, int]) -> list[int]:
    """Rentals on these hosts made after the host was first blocklisted (none, with the seed's
    day kept: the old breaker lifted the entries and rented them again after every pause)."""
    first: dict[int, float] = {}
    for entry in ledger(f):
        host = (entry.get("data") or {}).get("host_id")
        if (
            host in hosts
            and entry["kind"] == "decision"
            and entry["message"].startswith("blocklist")
        ):
            first[host] = min(first.get(host, float("inf")), float(entry["time"]))
    late = []
    for vast_id, created in rented(f, name).items():
        host = f.sim.instance(vast_id).machine.host_id
        if host in hosts and created > first.get(host, float("inf")):
            late.append(host)
    return late


def opened_at(f: Fleet) -> list[float]:
    return [float(e["time"]) for e in lines(f, "breaker_open")]


def per_cycle(times: list[float], openings: list[float]) -> list[int]:
    """Rentals between consecutive breaker openings (the last cycle runs to the end)."""
    edges = [float("-inf"), *sorted(openings), float("inf")]
    return [sum(1 for t in times if a <= t < b) for a, b in pairwise(edges)]


def test_broken_cheap_hosts_are_rented_once_and_a_worker_comes_up() -> None:
    """Point 1, creates that fail: each broken host is blocklisted for its day and never rented
    again; the next offer up makes a worker (the old controller: 42 rentals, all on them)."""
    spec = cluster("cheap", min_workers=1, factor=1)
    with fleet(spec) as f:
        broken = cheapest_hosts(f, "cheap", 3)
        for machine in broken.values():
            f.sim.faults.oci_failure(machine)
        run(f, START + 3 * H)
        on_broken = [h for h in hosts_rented(f, "cheap") if h in broken]
        assert sorted(on_broken) == sorted(broken), on_broken  # each once, never again
        assert rented_after_blocklisting(f, "cheap", broken) == []
        assert workers(f, "cheap")
        enrolled = [float(e["time"]) for e in lines(f, "enrolled")]
        assert enrolled and min(enrolled) - START <= 25 * M
        blocked = f.controller.records().blocklist["cheap"]
        assert set(broken) <= set(blocked)


def test_cheap_hosts_whose_containers_cannot_reach_the_head_are_not_rented_again() -> None:
    """Point 1, factor 2 and six cheap hosts whose containers cannot reach the head (the old
    controller: 70 rentals, no worker)."""
    spec = cluster("unreach", min_workers=1, factor=2)
    with fleet(spec) as f:
        broken = cheapest_hosts(f, "unreach", 6)
        cut = ContainerFault(head_unreachable=Span())

        def fault(vast_id: int) -> ContainerFault:
            host = f.sim.instance(vast_id).machine.host_id
            return cut if host in broken else HEALTHY

        f.agents.next_fault = fault
        run(f, START + 3 * H)
        assert rented_after_blocklisting(f, "unreach", broken) == []
        assert len([h for h in hosts_rented(f, "unreach") if h in broken]) <= 2 * len(broken)
        assert workers(f, "unreach")


def test_a_never_enrolling_image_rents_at_most_slots_times_factor_per_cycle_for_8_slots() -> None:
    """Point 2 and the canary rule: a request of 8 slots rents what one of 3 does, per breaker
    cycle; openings in a row double the pause and the second alerts a person."""
    spec = cluster("eight", min_workers=8, max_workers=8, factor=2)
    bound = spec.breaker.slots * spec.node_types["gpu"].candidate_factor
    with fleet(spec, faults=lambda vast_id: ContainerFault(image=Image.IDLES)) as f:
        run(f, START + 3 * H)
        times = sorted(rented(f, "eight").values())
        openings = opened_at(f)
        assert len(openings) >= 2
        assert max(per_cycle(times, openings)) <= bound, per_cycle(times, openings)
        gaps = [b - a for a, b in pairwise(openings)]
        assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # the pause doubles
        alerts = [a for a in f.controller.records().alerts if a.cls == "breaker_repeated"]
        assert alerts
        assert len(times) <= bound * len(openings) + bound


def test_workers_that_enroll_and_die_open_the_breaker() -> None:
    """Point 3: an image without `ray` enrolls every candidate and every worker ends at once with
    `bootstrap_error`; short lives count, so the breaker opens (the old controller: 240 rentals
    and 120 reports in an hour, no breaker)."""
    spec = cluster("noray", min_workers=1, factor=2)
    bound = spec.breaker.slots * spec.node_types["gpu"].candidate_factor
    with fleet(spec, faults=lambda vast_id: ContainerFault(image=Image.NO_RAY)) as f:
        run(f, START + 1 * H)
        times = sorted(rented(f, "noray").values())
        openings = opened_at(f)
        assert openings, "the breaker never opened"
        assert max(per_cycle(times, openings)) <= bound, per_cycle(times, openings)
        assert len(times) <= 3 * bound
        assert lines(f, "short_life")


def test_a_cluster_whose_ray_head_cannot_be_read_rents_nothing_and_alerts() -> None:
    """Point 3, a Ray head that is down: after 60 s nothing is rented for the cluster and a
    person is alerted; once Ray answers again, renting resumes."""
    spec = cluster("headless", min_workers=2, max_workers=2, factor=1)
    down = Span(START + 10 * M, START + 70 * M)
    with fleet(spec) as f:
        f.controller.signals = Signals(f.clock, readable=lambda now: not down.covers(now))
        run(f, START + 10 * M)
        assert len(workers(f, "headless")) == 2
        # its workers' Ray cannot outlive the head: they end, and nothing replaces them
        for vast_id in workers(f, "headless"):
            f.agents.faults[vast_id] = ContainerFault(ray_exits_at=START + 12 * M)
        run(f, START + 70 * M)
        late = [t for t in rented(f, "headless").values() if t > START + 11 * M + 30]
        assert late == [], late
        alerts = [a for a in f.controller.records().alerts if a.cls == "ray_unreadable"]
        assert alerts and "nothing is rented" in alerts[0].message
        run(f, START + 100 * M)
        assert len(workers(f, "headless")) == 2


def test_fixing_the_image_brings_a_worker_within_a_breaker_pause() -> None:
    """DESIGN.md 11: a change of the configuration resets the breaker (its pause included) and
    lifts the entries a configuration fault explains."""
    spec = cluster("fixme", min_workers=1, factor=2, image=BROKEN)
    fixed = cluster("fixme", min_workers=1, factor=2, image=IMAGE)

    def fault(f: Fleet) -> object:
        def by_image(vast_id: int) -> ContainerFault:
            noray = f.sim.instance(vast_id).image == BROKEN
            return ContainerFault(image=Image.NO_RAY) if noray else HEALTHY

        return by_image

    with fleet(spec) as f:
        f.agents.next_fault = fault(f)  # type: ignore[assignment]
        run(f, START + 40 * M)
        assert len(opened_at(f)) >= 2 and not workers(f, "fixme")
        changed = f.clock.now()
        f.controller.set_specs({"fixme": fixed})
        run(f, changed + spec.breaker.pause_seconds)
        assert workers(f, "fixme")
        assert lines(f, "breaker_reset")
        enrolled = [float(e["time"]) for e in lines(f, "enrolled") if float(e["time"]) > changed]
        assert enrolled and min(enrolled) - changed < spec.breaker.pause_seconds


def test_a_worker_that_serves_on_past_an_opening_lifts_the_canary() -> None:
    """The adversary's seed 107: a worker that enrolled before the breaker opened and serves its
    `min_service_seconds` during the pause proves the configuration (DESIGN.md 11: "a worker
    that serves ... resets it"), so the demand after the pause is placed whole, not one canary
    slot at a time. Its judge cut canary cycles only at enrollments, and counted the rentals
    after such a proof into the opening's cycle."""
    spec = cluster("proof", min_workers=0, max_workers=6, factor=1, head="breaker: {slots: 1}")
    order: list[int] = []

    def fault(vast_id: int) -> ContainerFault:
        order.append(vast_id)
        # the second worker of the first scale-up (the third rental) dies short: 5 min of Ray
        return ContainerFault(ray_exits_at=START + 17 * M) if len(order) == 3 else HEALTHY

    def demand(now: float) -> dict[tuple[str, str], int]:
        wanted = 1 if now < START + 12 * M else 3 if now < START + 25 * M else 6
        return {("proof", "gpu"): wanted}

    with fleet(spec, faults=fault) as f:
        f.controller.signals = Signals(f.clock, demand_at=demand)
        run(f, START + 40 * M)
        (opened,) = opened_at(f)
        requests = sorted(f.controller.records().requests.values(), key=lambda r: r.placed_at)
        after = [r for r in requests if r.placed_at > opened]
        # the pause (10 min) passed with the older worker proven: one request for the 4 slots
        # the demand of 6 lacks, its 4 candidates rented at once (a canary lets out one slot)
        assert after and len(after[0].slots) == 4, [
            (r.placed_at - START, len(r.slots)) for r in after
        ]
        late = [t for t in rented(f, "proof").values() if t > opened]
        assert len(late) == 4 and len(set(late)) == 1, late
        assert len(workers(f, "proof")) == 6
