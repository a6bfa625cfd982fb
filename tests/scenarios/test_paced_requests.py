"""A big scale-up at vast's pace meets every provision deadline (issue 25).

vast allows one create every 4.5 s per account, and a request's provision deadline is fixed when
it is placed. A request of 30 slots is 30 creates, 138 s at the client's pace, against a 60-s
deadline (short thresholds allowed, to keep the world small): the creates after the deadline rented candidates for a request that expired while they
were sent, and its last slots ended with no candidate at all, counted against the node type by
the rent-loop breaker. Now a request holds only the slots its candidates can be created for
before its deadline (`scaling.paced`), the rest of the demand is placed as those fill, and the
executor sends no create for a request whose deadline passed while it waited its turn.
"""

from __future__ import annotations

from fleetsim.harness import START, fleet
from reconciler.model.requestrecord import RequestStatus
from reconciler.spec.loader import load_texts
from tests.head.harness import market
from tests.scenarios.world import M, cluster_text, lines, workers

SLOTS = 30
DEADLINE = 60  # below the 300-s floor (allow_short_thresholds): 13 creates at the pace


def test_a_request_of_30_slots_is_placed_as_the_pace_can_meet_its_deadlines() -> None:
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
        f.run_until(START + 30 * M, step=30.0)
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
