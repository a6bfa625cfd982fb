"""Requests and the rent-loop breaker as the seed words them (DESIGN.md 10), on the real planner.

A request of n slots rents at most `candidate_factor x n` candidates over its whole life; a slot
that can no longer be filled ends with no worker at once and counts toward the breaker; the next
attempt is a new request that the breaker may refuse. Finding 2 of issue 12: failed candidates
were replaced at every reconcile and slots counted only at the 30-minute deadline, so an image
that never enrolls rented 9 machines in 4 minutes and never opened the breaker.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.observation import Observation
from reconciler.model.observed import Instance
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import (
    BlockEntry,
    BreakerState,
    Intent,
    Phase,
    Records,
    Role,
    breaker_key,
)
from reconciler.model.requestrecord import RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.planning import breaker
from reconciler.planning.draft import Draft
from tests.planning.builders import LINEAGE, NOW, offer, record, records, request, row, spec
from tests.planning.planned import plan, react

OFFERS = tuple(offer(i, 0.1 * i) for i in range(1, 12))
SPEC = spec(min_workers=1, factor=2)


def plan_of(state: Records, listing: list[Instance], s: ClusterSpec = SPEC) -> Plan:
    observation = Observation(listing=tuple(listing), offers={(s.name, "gpu"): OFFERS})
    return plan([s], observation, state, lineage=LINEAGE, serial=1, now=NOW)


def rents(p: Plan) -> list[str]:
    return [a.record or "" for a in p.actions if a.kind is ActionKind.RENT]


def ended(ident: str) -> object:
    return record(
        ident,
        vast_id=abs(hash(ident)) % 10_000 + 1,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        ended_reason="enrollment_timeout",
    )


def test_a_request_rents_at_most_factor_times_n_over_its_life() -> None:
    # one slot, factor 2: one candidate already failed, one still pulls -> nothing more to rent
    state = records(request(), ended("i1"), record("i2", vast_id=2))  # type: ignore[arg-type]
    p = plan_of(state, [row(state.instances["i2"])])
    assert rents(p) == []
    assert p.records.requests["q1"].status is RequestStatus.OPEN


def test_a_slot_whose_candidates_all_ended_counts_at_once_and_a_new_request_replaces_it() -> None:
    state = records(request(), ended("i1"), ended("i2"))  # type: ignore[arg-type]
    p = plan_of(state, [])
    q1 = p.records.requests["q1"]
    assert q1.status is RequestStatus.EXPIRED and q1.slots[0].ended_without_worker
    counted = p.records.breakers[breaker_key("c1", "gpu")]
    assert (counted.consecutive_empty, counted.paused_until, counted.since) == (1, None, NOW)
    assert [d.cls for d in p.detections] == ["slots_no_worker"]
    assert "2 of 2 rentals used" in p.detections[0].detail
    new = [r for r in p.records.requests.values() if r.id != "q1"]
    assert len(new) == 1 and new[0].status is RequestStatus.OPEN  # the same need, a new request
    assert len(rents(p)) == 2 and {a.request for a in p.actions} == {new[0].id}


def test_the_third_such_slot_opens_the_breaker_and_nothing_is_rented() -> None:
    state = replace(
        records(request(), ended("i1"), ended("i2")),  # type: ignore[arg-type]
        breakers={breaker_key("c1", "gpu"): BreakerState(2, None)},
    )
    p = plan_of(state, [])
    paused = p.records.breakers[breaker_key("c1", "gpu")]
    assert paused.paused_until == NOW + SPEC.breaker.pause_seconds
    assert [a.kind for a in p.actions] == [ActionKind.PAUSE]
    assert rents(p) == []


def test_only_the_slots_nobody_can_fill_end() -> None:
    # 3 slots, factor 2 = 6 rentals: 5 failed, 1 pulls -> 2 slots end now, 1 waits for it
    failed = [ended(f"i{n}") for n in range(1, 6)]
    pulling = record("i6", vast_id=6)
    state = records(request(slots=3), *failed, pulling)  # type: ignore[arg-type]
    p = plan_of(state, [row(pulling)])
    q1 = p.records.requests["q1"]
    assert [s.ended_without_worker for s in q1.slots] == [False, True, True]
    assert q1.status is RequestStatus.OPEN
    assert p.records.breakers[breaker_key("c1", "gpu")].consecutive_empty == 2


def test_a_create_that_left_no_instance_is_not_a_rental() -> None:
    gone = record("i1", vast_id=None, phase=Phase.DESTROYED, intent=Intent.DESTROYED)
    state = records(request(), gone)
    assert len(rents(plan_of(state, []))) == 2


def test_requests_the_watchdogs_end_count_nothing_and_keep_their_candidates() -> None:
    """Issue 21, 7 (DESIGN.md 11): the request watchdogs end requests only. They destroyed a
    candidate that had pulled for minutes and counted its slot toward the breaker, so three
    flaps of Ray's demand paused a healthy node type."""
    state = records(request("q1"), request("q2"), record("i1", vast_id=1, request="q1"))
    ending = {
        "q1": replace(
            state.requests["q1"], status=RequestStatus.RELEASED, ended_reason="pool_idle_release"
        ),
        "q2": replace(
            state.requests["q2"], status=RequestStatus.FAILED, ended_reason="no_consumer"
        ),
    }
    p = react(state, [], {"c1": SPEC}, lineage=LINEAGE, serial=1, now=NOW, requests=ending)
    assert breaker_key("c1", "gpu") not in p.records.breakers
    assert not any(s.ended_without_worker for r in p.records.requests.values() for s in r.slots)
    assert p.actions == ()
    # nor does the next reconcile end the candidate: it keeps its own limits
    again = plan_of(p.records, [row(state.instances["i1"])], spec(min_workers=0))
    assert not [a for a in again.actions if a.kind is ActionKind.DESTROY]


def test_a_lost_worker_is_not_capacity() -> None:
    """Finding 8: lost workers counted as capacity, so nothing replaced them until went-silent
    ended them."""
    lost = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, request="q0", lost=True)
    filled = request("q0", workers=("w1",), status=RequestStatus.FILLED)
    p = plan_of(records(lost, filled), [row(lost)])
    assert len(rents(p)) == 2
    assert not [a for a in p.actions if a.kind is ActionKind.DESTROY]  # lost never destroys


def test_a_stop_vast_has_not_confirmed_bills_in_full_and_is_sent_again() -> None:
    """Finding 6: a failed stop was never sent again and was priced as storage only, so the
    budget admitted more rentals while it still billed in full."""
    stopping = record(
        "w1",
        vast_id=1,
        role=Role.WORKER,
        phase=Phase.STOPPING,
        intent=Intent.STOPPED,
        call_attempts=1,
        retry_at=NOW - 1,
        request="q0",
    )
    assert stopping.billing_dph == stopping.dph_total
    s = spec(min_workers=0)
    p = plan_of(records(stopping), [row(stopping)], s)
    assert [(a.kind, a.reason) for a in p.actions] == [(ActionKind.STOP, "finish_stop")]
    before = next(c for c in p.costs if c.cluster == "c1").before
    assert before == stopping.dph_total
    confirmed = plan_of(records(stopping), [row(stopping, actual_status="stopped")], s)
    assert confirmed.actions == ()
    done = confirmed.records.instances["w1"]
    assert done.phase is Phase.STOPPED and done.retry_at is None
    assert done.billing_dph == done.storage_dph


def test_a_stopping_machine_that_vanished_is_closed_after_the_missing_window() -> None:
    stopping = record(
        "w1",
        vast_id=1,
        role=Role.WORKER,
        phase=Phase.STOPPING,
        intent=Intent.STOPPED,
        provider_seen_at=NOW - 121,
        request="q0",
    )
    # one listing without it (vast's listing may miss an instance once) does not close it
    once = plan_of(records(stopping), [], spec(min_workers=0))
    assert once.records.instances["w1"].phase is Phase.STOPPING
    # 60 s of listings without it do
    gone = replace(stopping, missing_since=NOW - 60)
    p = plan_of(records(gone), [], spec(min_workers=0))
    assert p.records.instances["w1"].phase is Phase.DESTROYED


def test_a_person_pin_holds_a_machine_against_scale_down() -> None:
    """Finding 4: nothing set `pinned`, so gate 3 was dead."""
    workers = [
        record(
            f"w{n}",
            vast_id=n,
            role=Role.WORKER,
            phase=Phase.SERVING,
            enrolled_at=NOW - n,
            request="q0",
        )
        for n in (1, 2)
    ]
    pinned = replace(workers[0], pinned_by="alice", pinned_until=NOW + 60)
    s = spec(min_workers=0, max_workers=1)
    p = plan_of(records(pinned, workers[1]), [row(pinned), row(workers[1])], s)
    assert [(a.kind, a.record) for a in p.actions] == [(ActionKind.DESTROY, "w2")]
    expired = replace(pinned, pinned_until=NOW - 1)
    assert not expired.held(NOW) and pinned.held(NOW)


def test_a_lost_worker_at_max_workers_does_not_get_its_replacement_scaled_down() -> None:
    """Found by the fleet benchmark: the lost worker counted against max_workers, so at the cap
    the replacement it caused was scaled down at the next reconcile."""
    s = spec(min_workers=1, max_workers=1, factor=1)
    lost = record("w1", vast_id=1, role=Role.WORKER, phase=Phase.SERVING, request="q0", lost=True)
    replacement = record(
        "w2", vast_id=2, role=Role.WORKER, phase=Phase.SERVING, request="q9", enrolled_at=NOW
    )
    filled = [
        request("q0", workers=("w1",), status=RequestStatus.FILLED),
        request("q9", workers=("w2",), status=RequestStatus.FILLED),
    ]
    p = plan_of(records(lost, replacement, *filled), [row(lost), row(replacement)], s)
    assert p.actions == ()


def test_during_a_streak_a_new_request_tries_only_the_slots_the_breaker_has_left() -> None:
    """So a streak rents at most `breaker.slots x candidate_factor` (the fleet benchmark's broken
    image: a second 2-slot request took the count from 2 to 4, 8 rentals before the pause)."""
    s = spec(min_workers=2, factor=2)
    streak = BreakerState(2, None, since=NOW - 60, digest=s.node_types["gpu"].digest, proven=True)
    state = replace(records(), breakers={breaker_key("c1", "gpu"): streak})
    p = plan_of(state, [], s)
    (placed,) = [r for r in p.records.requests.values() if r.status is RequestStatus.OPEN]
    assert len(placed.slots) == 1 and len(rents(p)) == 2
    # and while that slot is out, no other request is placed
    again = plan_of(p.records, [], s)
    assert [r.id for r in again.records.requests.values()] == [placed.id]


def test_before_the_proof_a_cycle_lets_out_breaker_slots_slots_in_all() -> None:
    """The canary rule (issue 21, 2): a fresh node type of min_workers 8 places 3 slots, and
    no more while they are out, even once their candidates enrolled (the seed's reset on
    enrollment does not reopen the cycle; found by the adversary, seed 10)."""
    s = spec(min_workers=8, max_workers=8, factor=2)
    p = plan_of(records(), [], s)
    (placed,) = p.records.requests.values()
    assert len(placed.slots) == s.breaker.slots and len(rents(p)) == 2 * s.breaker.slots
    filled = replace(placed, status=RequestStatus.FILLED)
    again = plan_of(replace(p.records, requests={placed.id: filled}), [], s)
    assert [r.id for r in again.records.requests.values()] == [placed.id]


def test_the_breaker_never_lifts_a_blocklist_entry() -> None:
    """Issue 21, 1: the breaker unblocked the hosts of its streak when it opened, so when the
    cheapest hosts were the broken ones they were rented again after every pause."""
    old = BlockEntry(7, NOW + 9_999, "network", "gpu", NOW - 9_999)
    streak = BlockEntry(8, NOW + 80_000, "timeout", "gpu", NOW - 100, SPEC.node_types["gpu"].digest)
    state = replace(
        records(request(), ended("i1"), ended("i2")),  # type: ignore[arg-type]
        breakers={breaker_key("c1", "gpu"): BreakerState(2, None, since=NOW - 200)},
        blocklist={"c1": {7: old, 8: streak}},
    )
    p = plan_of(state, [])
    assert set(p.records.blocklist["c1"]) == {7, 8}
    assert [a.kind for a in p.actions] == [ActionKind.PAUSE]


def test_a_change_of_configuration_lifts_its_timeouts_and_resets_the_breaker() -> None:
    """DESIGN.md 11: entries a configuration fault explains (timeout, boot) made under the old
    digest are lifted and the breaker resets; network entries keep their day."""
    before = spec(min_workers=1, factor=2)
    after = spec(min_workers=1, factor=2, image="rayproject/ray:fixed")
    old_digest = before.node_types["gpu"].digest
    assert after.node_types["gpu"].digest != old_digest
    entries = {
        7: BlockEntry(7, NOW + 9_999, "network", "gpu", NOW - 300, old_digest),
        8: BlockEntry(8, NOW + 80_000, "timeout", "gpu", NOW - 200, old_digest),
        9: BlockEntry(9, NOW + 80_000, "boot", "gpu", NOW - 100, old_digest),
    }
    paused = BreakerState(0, NOW + 3000, digest=old_digest, openings=2, short_lives=1)
    state = replace(
        records(), breakers={breaker_key("c1", "gpu"): paused}, blocklist={"c1": entries}
    )
    p = plan_of(state, [], after)
    draft = Draft.start(p.records, lineage=LINEAGE, now=NOW)
    assert set(breaker.blocked(draft, "c1", after.node_types["gpu"])) == {7}
    # dormant, not gone: going back to the old configuration brings them back (adversary seed 25)
    assert set(breaker.blocked(draft, "c1", before.node_types["gpu"])) == {7, 8, 9}
    fresh = p.records.breakers[breaker_key("c1", "gpu")]
    assert (fresh.paused_until, fresh.openings, fresh.count) == (None, 0, 0)
    assert fresh.digest == after.node_types["gpu"].digest
    assert "breaker_reset" in [d.cls for d in p.detections]
    assert len(rents(p)) == 2  # launches resume at once
