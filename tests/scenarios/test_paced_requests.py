"""A big scale-up at vast's pace meets every provision deadline (issue 25).

vast allows one create every 4.5 s per account, and a request's provision deadline is fixed when
it is placed. A request of 20 slots is 20 creates, 92 s at the client's pace, against a 60-s
deadline (short thresholds allowed, to keep the world small): 5 of its candidates were created
after the deadline had passed (spared by the deadline's grace only because they were new; at
scale, slots with no candidate yet at the deadline end with it and count for the breaker). Now a
request holds only the slots its candidates can be created for before its deadline
(`scaling.paced`), the rest of the demand is placed as those fill, and the executor sends no
create for a request whose deadline passed while it waited its turn.
"""

from __future__ import annotations

from typing import Any

from fleetsim.harness import START, fleet
from reconciler.model.requestrecord import RequestStatus
from reconciler.spec.loader import load_texts
from tests.head.harness import market
from tests.scenarios.world import M, cluster_text, lines, workers

SLOTS = 20
SEARCH = "POST /api/v0/bundles/"
DEADLINE = 60  # below the 300-s floor (allow_short_thresholds): 13 creates at the pace


def test_a_request_of_20_slots_is_placed_as_the_pace_can_meet_its_deadlines() -> None:
    text = cluster_text(
        "big",
        min_workers=SLOTS,
        max_workers=SLOTS,
        factor=1,
        cap=100_000.0,
        watchdogs={"provision_deadline_seconds": DEADLINE},
        head=(
            "provider: {type: vastsim}\n  testing: {allow_short_thresholds: true}\n"
            f"  breaker: {{slots: {SLOTS + 1}}}"
        ),
    )
    spec = load_texts([("big.yaml", text)]).clusters[0]
    with fleet(spec, market=market(SLOTS + 20, price_scale=100_000), rate_limits=True) as f:
        f.run_until(START + 15 * M, step=30.0)
        records = f.controller.records()
        requests = list(records.requests.values())
        # every request small enough for its candidates to be created before its deadline
        assert max(len(r.slots) for r in requests) <= DEADLINE // 4.6
        by_id = {r.id: r for r in requests}
        late = [
            r.id
            for r in records.instances.values()
            if r.request_id in by_id and r.created_at >= by_id[r.request_id].provision_deadline
        ]
        assert not late
        assert not [r.id for r in requests if r.status is RequestStatus.EXPIRED]
        assert not lines(f, "provision_deadline")
        assert len(workers(f, "big")) == SLOTS


def test_offers_gone_before_their_creates_are_replaced_from_one_search_a_tick() -> None:
    """The tick's search is made; then somebody else rents the machines of the three cheapest
    offers before our creates reach them. Each of those rents takes the next acceptable offer,
    all three from one search made at the first gone offer (each searched again before: vast
    allows a search every 6 s, and a tick renting 100 searched up to 100 times)."""
    text = cluster_text(
        "gone", min_workers=4, max_workers=4, factor=1, cap=100.0, head="breaker: {slots: 5}"
    )
    spec = load_texts([("gone.yaml", text)]).clusters[0]
    with fleet(spec, market=market(30)) as f:
        search = f.client.search_offers
        taken: list[int] = []

        def search_then_lose_three(query: Any) -> Any:
            found = search(query)
            if not taken:
                cheapest = sorted(found, key=lambda o: o.dph_total)[:3]
                taken.extend(o.machine_id for o in cheapest)
                f.sim.mutate(lambda now: [f.sim.market.occupy(m) for m in taken])
            return found

        f.client.search_offers = search_then_lose_three  # type: ignore[method-assign]
        seen = len(f.sim.requests)
        f.tick()
        searches = [r for r in f.sim.requests[seen:] if r.route == SEARCH]
        gone = [
            e for e in lines(f, "scale_up", "outcome") if e["data"].get("outcome") == "offer_gone"
        ]
        rented = [e for e in lines(f, "scale_up", "outcome") if e["data"].get("outcome") == "ok"]
        assert len(gone) == 3 and len(rented) == 4
        assert len(searches) == 2  # the tick's own, and one for the three replacements
