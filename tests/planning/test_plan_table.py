"""The planner as a table: situation in, actions out (kind, reason, record)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from reconciler.model.demand import scripted
from reconciler.model.observation import Observation
from reconciler.model.observed import Instance, Offer
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import BlockEntry, BreakerState, Intent, Phase, Records, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.model.spec import ClusterSpec
from reconciler.planning.retention import prune
from reconciler.settings import RETENTION_SECONDS
from tests.planning.builders import (
    LINEAGE,
    NOW,
    OTHER_LINEAGE,
    offer,
    record,
    records,
    request,
    row,
    spec,
)
from tests.planning.planned import plan

Act = tuple[str, str, str | None]  # (kind, reason, record or vast id as str)


@dataclass
class Case:
    specs: list[ClusterSpec]
    state: Records
    listing: list[Instance] | None
    offers: list[Offer] = field(default_factory=list)
    expect: list[Act] = field(default_factory=list)
    check: Callable[[Plan], None] | None = None
    demand: int = 0
    declared: frozenset[str] | None = None


def run(case: Case) -> Plan:
    observation = Observation(
        listing=tuple(case.listing) if case.listing is not None else None,
        offers={(s.name, "gpu"): tuple(case.offers) for s in case.specs},
        ray=scripted(
            {s.name: s for s in case.specs}, {(s.name, "gpu"): case.demand for s in case.specs}
        ),
    )
    return plan(
        case.specs,
        observation,
        case.state,
        lineage=LINEAGE,
        serial=3,
        now=NOW,
        declared=case.declared,
    )


def acts(result: Plan) -> list[Act]:
    out: list[Act] = []
    for a in result.actions:
        who = a.record if a.kind is not ActionKind.BLOCKLIST else str(a.host_id)
        out.append((a.kind.value, a.reason, who or (str(a.vast_id) if a.vast_id else None)))
    return out


CHEAP = [offer(1, 0.30), offer(2, 0.40), offer(3, 0.50), offer(4, 0.60)]


def scale_up() -> Case:
    return Case(
        [spec(min_workers=1, factor=2)],
        records(),
        [],
        CHEAP,
        [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")],
        check=lambda p: [a.offer.offer_id for a in p.actions if a.offer] == [1, 2],  # type: ignore[misc]
    )


def factor_three() -> Case:
    return Case(
        [spec(min_workers=1, factor=3)],
        records(),
        [],
        CHEAP,
        [("rent", "scale_up", f"i{n}") for n in (101, 102, 103)],
    )


def two_slots() -> Case:
    return Case(
        [spec(min_workers=2, factor=2)],
        records(),
        [],
        [*CHEAP, offer(5, 0.7)],
        [("rent", "scale_up", f"i{n}") for n in (101, 102, 103, 104)],
    )


def cap() -> Case:
    # $0.80/h fits 0.30 + 0.40 but not 0.50 on top: the third candidate is skipped.
    def skipped(p: Plan) -> None:
        assert any("over the cap" in s.why for s in p.skipped)
        (cost,) = p.costs
        assert cost.after == pytest.approx(0.70) and cost.cap == 0.8

    return Case(
        [spec(min_workers=2, factor=2, cap=0.8)],
        records(),
        [],
        CHEAP,
        [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")],
        check=skipped,
    )


def blocklisted_host() -> Case:
    state = records()
    state = replace(state, blocklist={"c1": {2001: BlockEntry(2001, NOW + 60, "timeout")}})

    def chosen(p: Plan) -> None:
        assert [a.offer.offer_id for a in p.actions if a.offer] == [2, 3]
        assert any("blocklisted" in s.why for s in p.skipped)

    return Case(
        [spec()],
        state,
        [],
        CHEAP,
        [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")],
        chosen,
    )


def expired_blocklist_entry() -> Case:
    state = replace(records(), blocklist={"c1": {2001: BlockEntry(2001, NOW - 1, "timeout")}})
    return Case(
        [spec()],
        state,
        [],
        CHEAP,
        [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")],
        check=lambda p: [a.offer.offer_id for a in p.actions if a.offer] == [1, 2],
    )  # type: ignore[misc]


def breaker_open() -> Case:
    state = replace(records(), breakers={"c1/gpu": BreakerState(0, NOW + 300)})
    return Case([spec()], state, [], CHEAP, [])


def breaker_closed_again() -> Case:
    state = replace(records(), breakers={"c1/gpu": BreakerState(0, NOW - 1)})
    return Case(
        [spec()], state, [], CHEAP, [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")]
    )


def breaker_trips() -> Case:
    # A request expires with its one slot empty: the third empty slot in a row pauses launches;
    # the host its candidate stalled stays blocklisted (the breaker never lifts an entry).
    cand = record("i1", vast_id=11, first_observed_at=NOW - 1300)
    state = records(cand, request(provision_deadline=NOW - 1), breakers={"c1/gpu": BreakerState(2)})
    return Case(
        [spec()],
        state,
        [row(cand)],
        CHEAP,
        [
            ("destroy", "provision_deadline", "i1"),
            ("blocklist", "provision_deadline", "53147"),
            ("pause", "breaker_open", None),
        ],
    )


def deadline_spares_a_candidate_in_its_grace() -> Case:
    """Issue 21, 8: a candidate first seen 55 s before its request's deadline was destroyed and
    its host blocklisted for a day; inside its pull limit from our first observation it keeps
    its own limits, and the request past its deadline rents nothing more."""
    cand = record("i1", vast_id=11, first_observed_at=NOW - 55)
    state = records(cand, request(provision_deadline=NOW - 1))

    def kept(p: Plan) -> None:
        assert p.records.requests["q1"].status is RequestStatus.OPEN
        assert not p.records.blocklist.get("c1")

    return Case([spec()], state, [row(cand)], CHEAP, [], kept)


def missing_once() -> Case:
    """Last seen long ago (listings failed since: unknown), missing from one listing: kept."""
    cand = record("i1", vast_id=11, provider_seen_at=NOW - 600)

    def noted(p: Plan) -> None:
        assert p.records.instances["i1"].missing_since == NOW

    return Case(
        [spec()], records(cand, request()), [], CHEAP, [("rent", "scale_up", "i100")], noted
    )


def missing_sixty_seconds() -> Case:
    cand = record("i1", vast_id=11, provider_seen_at=NOW - 120, missing_since=NOW - 60)
    return Case(
        [spec()],
        records(cand, request()),
        [],
        CHEAP,
        [
            ("destroy", "missing_from_listing", "i1"),
            ("rent", "scale_up", "i100"),
        ],
    )


def missing_fifty_nine_seconds() -> Case:
    """Two listings without it, but the last one that showed it was only 59 s ago: kept."""
    cand = record("i1", vast_id=11, provider_seen_at=NOW - 59, missing_since=NOW - 30)
    return Case([spec()], records(cand, request()), [], CHEAP, [("rent", "scale_up", "i100")])


def missing_sixty_seconds_after_last_sighting() -> Case:
    """The seed's words: 60 s after the last list that showed it, measured from that list (not
    from the first list without it), once a second list confirms it."""
    cand = record("i1", vast_id=11, provider_seen_at=NOW - 60, missing_since=NOW - 5)
    return Case(
        [spec()],
        records(cand, request()),
        [],
        CHEAP,
        [
            ("destroy", "missing_from_listing", "i1"),
            ("rent", "scale_up", "i100"),
        ],
    )


def seen_again_clears_missing() -> Case:
    cand = record("i1", vast_id=11, missing_since=NOW - 59)

    def cleared(p: Plan) -> None:
        assert p.records.instances["i1"].missing_since is None

    return Case(
        [spec()],
        records(cand, request()),
        [row(cand, actual_status="loading")],
        CHEAP,
        [("rent", "scale_up", "i100")],
        cleared,
    )


def exited() -> Case:
    cand = record("i1", vast_id=11)
    return Case(
        [spec()],
        records(cand, request()),
        [row(cand, actual_status="exited")],
        CHEAP,
        [
            ("destroy", "exited", "i1"),
            ("blocklist", "exited", str(cand.host_id)),
            ("rent", "scale_up", "i100"),
        ],
    )


def oci_failure() -> Case:
    cand = record("i1", vast_id=11)
    bad = row(cand, actual_status="created", status_msg="Error: OCI runtime create failed: x")
    return Case(
        [spec()],
        records(cand, request()),
        [bad],
        CHEAP,
        [
            ("destroy", "create_failed", "i1"),
            ("blocklist", "create_failed", str(cand.host_id)),
            ("rent", "scale_up", "i100"),
        ],
    )


def ip_changed() -> Case:
    worker = record(
        "i1",
        vast_id=11,
        role=Role.WORKER,
        phase=Phase.ENROLLED,
        public_ip="203.0.113.5",
        enrolled_at=NOW - 50,
    )
    req = request(workers=("i1",), status=RequestStatus.FILLED)
    return Case(
        [spec()],
        records(worker, req),
        [row(worker, public_ipaddr="198.51.100.7")],
        CHEAP,
        [
            ("destroy", "public_ip_changed", "i1"),
            ("blocklist", "public_ip_changed", str(worker.host_id)),
            ("rent", "scale_up", "i101"),
            ("rent", "scale_up", "i102"),
        ],
    )


def pull_limit() -> Case:
    cand = record("i1", vast_id=11, first_observed_at=NOW - 1300)
    return Case(
        [spec()],
        records(cand, request()),
        [row(cand, actual_status="loading")],
        CHEAP,
        [
            ("destroy", "pull_timeout", "i1"),
            ("blocklist", "pull_timeout", str(cand.host_id)),
            ("rent", "scale_up", "i100"),
        ],
    )


def enrollment_limit() -> Case:
    cand = record("i1", vast_id=11, phase=Phase.RUNNING, first_running_at=NOW - 61)
    return Case(
        [spec()],
        records(cand, request()),
        [row(cand)],
        CHEAP,
        [
            ("destroy", "enrollment_timeout", "i1"),
            ("blocklist", "enrollment_timeout", str(cand.host_id)),
            ("rent", "scale_up", "i100"),
        ],
    )


def enrollment_within_limit() -> Case:
    cand = record("i1", vast_id=11, phase=Phase.RUNNING, first_running_at=NOW - 30)
    other = record("i2", vast_id=12)
    return Case(
        [spec()],
        records(cand, other, request()),
        [row(cand), row(other, actual_status="loading")],
        CHEAP,
        [],
    )


def extra_candidates() -> Case:
    worker = record("i1", vast_id=11, role=Role.WORKER, phase=Phase.ENROLLED, enrolled_at=NOW - 5)
    extra = record("i2", vast_id=12)
    state = records(worker, extra, request(workers=("i1",)))
    return Case(
        [spec()],
        state,
        [row(worker), row(extra, actual_status="loading")],
        CHEAP,
        [("destroy", "extra_candidate", "i2")],
    )


def orphan_and_foreign() -> Case:
    """The grace runs from our own first observation: 77 was first seen by us 601 s ago; 78 is
    old by vast's start_date, but we only just saw it."""
    orphan = row(ident=77, label=f"rv.c1.{LINEAGE[:8]}.i55", start_date=NOW - 601, dph_total=0.4)
    young = row(ident=78, label=f"rv.c1.{LINEAGE[:8]}.i56", start_date=NOW - 9999)
    foreign = row(ident=88, label=f"rv.c1.{OTHER_LINEAGE[:8]}.i5", start_date=NOW - 9999)
    stranger = row(ident=99, label="my-own-box", start_date=NOW - 9999)

    def loud(p: Plan) -> None:
        assert [f.vast_id for f in p.foreign] == [88]
        assert p.warnings[0].code == "foreign"
        assert "another state" in p.warnings[0].text

    def loud_and_timed(p: Plan) -> None:
        loud(p)
        assert p.records.unrecorded_seen == {77: NOW - 601, 78: NOW}

    return Case(
        [spec(min_workers=0)],
        replace(records(), unrecorded_seen={77: NOW - 601}),
        [orphan, young, foreign, stranger],
        CHEAP,
        [("destroy", "orphan", "77")],
        loud_and_timed,
    )


def pending_create_adopted() -> Case:
    pending = record("i1", vast_id=None, phase=Phase.PENDING_CREATE, first_observed_at=None)
    seen = row(pending, ident=4242, actual_status="loading")

    def adopted(p: Plan) -> None:
        rec = p.records.instances["i1"]
        assert rec.vast_id == 4242 and rec.phase is Phase.PULLING
        assert any(n.code == "adopted" and "adopted instance 4242" in n.text for n in p.notes)

    # The adopted candidate counts: only one more is rented for the request's slot.
    return Case(
        [spec()],
        records(pending, request()),
        [seen],
        CHEAP,
        [("rent", "scale_up", "i100")],
        adopted,
    )


def scale_down_above_max() -> Case:
    ws = [
        record(f"i{n}", vast_id=n, role=Role.WORKER, phase=Phase.ENROLLED, enrolled_at=NOW - n)
        for n in (1, 2, 3)
    ]
    pinned = replace(ws[0], pinned=True)
    state = records(
        pinned,
        ws[1],
        ws[2],
        request(slots=3, workers=("i1", "i2", "i3"), status=RequestStatus.FILLED),
    )
    return Case(
        [spec(min_workers=0, max_workers=1)],
        state,
        [row(w) for w in ws],
        CHEAP,
        [("destroy", "scale_down", "i2"), ("destroy", "scale_down", "i3")],
    )


def demand_raises_target() -> Case:
    return Case(
        [spec(min_workers=0, factor=1)],
        records(),
        [],
        CHEAP,
        [("rent", "scale_up", "i101"), ("rent", "scale_up", "i102")],
        demand=2,
    )


def failed_listing() -> Case:
    cand = record("i1", vast_id=11, provider_seen_at=NOW - 10_000)

    def refused(p: Plan) -> None:
        assert p.errored and not p.actions
        assert p.errors[0].code == "listing_unknown"
        assert "unknown" in p.errors[0].text

    return Case([spec()], records(cand, request()), None, CHEAP, [], refused)


def not_ours_never_touched() -> Case:
    theirs = record("i1", vast_id=11, lineage=OTHER_LINEAGE, provider_seen_at=NOW - 10_000)
    return Case([spec(min_workers=0)], records(theirs), [], CHEAP, [])


def destroyed_records_skipped() -> Case:
    dead = record(
        "i1",
        vast_id=11,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        provider_seen_at=NOW - 10_000,
    )
    return Case([spec(min_workers=0)], records(dead), [], CHEAP, [])


def unfinished_destroy() -> Case:
    dying = record("i1", vast_id=11, phase=Phase.DESTROYING, intent=Intent.DESTROYED)
    return Case(
        [spec(min_workers=0)],
        records(dying),
        [row(dying)],
        CHEAP,
        [("destroy", "finish_destroy", "i1")],
    )


def restart_outbid_worker() -> Case:
    worker = record("i1", vast_id=11, role=Role.WORKER, phase=Phase.ENROLLED, enrolled_at=NOW - 500)
    state = records(worker, request(workers=("i1",), status=RequestStatus.FILLED))
    return Case(
        [spec()], state, [row(worker, actual_status="stopped")], CHEAP, [("start", "restart", "i1")]
    )


def removed_cluster() -> Case:
    """A completely loaded directory no longer declares `gone`: its machines are pruned."""
    worker = record("i1", cluster="gone", vast_id=11, role=Role.WORKER, phase=Phase.ENROLLED)
    return Case(
        [spec(min_workers=0)],
        records(worker),
        [row(worker)],
        CHEAP,
        [("destroy", "removed_from_spec", "i1")],
        declared=frozenset({"c1"}),
    )


def cluster_outside_the_plan() -> Case:
    """A plan about c1 only (one file, or the clusters due this tick) neither keeps nor retires
    another cluster: its healthy worker stays (finding 1: two clusters destroyed each other)."""
    worker = record("i1", cluster="other", vast_id=11, role=Role.WORKER, phase=Phase.ENROLLED)
    return Case([spec(min_workers=0)], records(worker), [row(worker)], CHEAP, [])


def removed_cluster_failed_destroy_retried() -> Case:
    """A destroy of a removed cluster's machine that failed is sent again once its backoff
    passed (finding 6), and not before."""
    dying = record(
        "i1",
        cluster="gone",
        vast_id=11,
        role=Role.WORKER,
        phase=Phase.DESTROYING,
        intent=Intent.DESTROYED,
        call_attempts=1,
        retry_at=NOW - 1,
    )
    waiting = record(
        "i2",
        cluster="gone",
        vast_id=12,
        role=Role.WORKER,
        phase=Phase.DESTROYING,
        intent=Intent.DESTROYED,
        call_attempts=2,
        retry_at=NOW + 5,
    )
    return Case(
        [spec(min_workers=0)],
        records(dying, waiting),
        [row(dying), row(waiting)],
        CHEAP,
        [("destroy", "finish_destroy", "i1")],
        declared=frozenset({"c1"}),
    )


CASES = {
    f.__name__: f
    for f in (
        missing_sixty_seconds_after_last_sighting,
        cluster_outside_the_plan,
        removed_cluster_failed_destroy_retried,
        scale_up,
        factor_three,
        two_slots,
        cap,
        blocklisted_host,
        expired_blocklist_entry,
        breaker_open,
        breaker_closed_again,
        breaker_trips,
        deadline_spares_a_candidate_in_its_grace,
        missing_once,
        missing_fifty_nine_seconds,
        missing_sixty_seconds,
        seen_again_clears_missing,
        exited,
        oci_failure,
        ip_changed,
        pull_limit,
        enrollment_limit,
        enrollment_within_limit,
        extra_candidates,
        orphan_and_foreign,
        pending_create_adopted,
        scale_down_above_max,
        demand_raises_target,
        failed_listing,
        not_ours_never_touched,
        destroyed_records_skipped,
        unfinished_destroy,
        restart_outbid_worker,
        removed_cluster,
    )
}


@pytest.mark.parametrize("name", list(CASES))
def test_plan(name: str) -> None:
    case = CASES[name]()
    result = run(case)
    assert acts(result) == case.expect
    if case.check:
        outcome = case.check(result)
        assert outcome is None or outcome is True


def test_plan_is_pure_same_input_same_plan() -> None:
    case = scale_up()
    assert run(case) == run(case)


def test_every_action_has_reason_and_cost() -> None:
    result = run(exited())
    for action in result.actions:
        assert action.reason
    assert sum(a.dph_delta for a in result.actions) == pytest.approx(
        result.costs[0].after - result.costs[0].before
    )


def test_an_exempt_worker_fills_its_slot_and_nothing_more_is_rented() -> None:
    """A node type without an agent never enrolls: running is what makes it a worker, and it
    must take its request's slot, or the planner would rent for that slot again and again."""
    exempt = spec(min_workers=1, factor=2, extra="")
    cand = record("i1", vast_id=11, exempt=True, phase=Phase.PULLING)
    other = record("i2", vast_id=12, exempt=True, phase=Phase.PULLING)
    state = records(cand, other, request())
    result = run(Case([exempt], state, [row(cand), row(other, actual_status="loading")], CHEAP))
    worker = result.records.instances["i1"]
    assert worker.role is Role.WORKER and worker.slot_id == "q1s1"
    assert result.records.requests["q1"].slots[0].worker == "i1"
    assert acts(result) == [("destroy", "extra_candidate", "i2")]


def test_retention_forgets_long_ended_machines_and_keeps_everything_live() -> None:
    old = record(
        "i1",
        vast_id=1,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        ended_at=NOW - RETENTION_SECONDS - 1,
    )
    recent = record(
        "i2", vast_id=2, phase=Phase.DESTROYED, intent=Intent.DESTROYED, ended_at=NOW - 60
    )
    live = record("i3", vast_id=3, created_at=NOW - 10 * RETENTION_SECONDS)
    closed = request(
        "q9", status=RequestStatus.FILLED, placed_at=NOW - 2 * RETENTION_SECONDS, workers=("i1",)
    )
    kept = prune(records(old, recent, live, closed), NOW)
    assert set(kept.instances) == {"i2", "i3"}
    assert kept.requests == {}
    assert prune(kept, NOW) is kept  # nothing to drop: the same object, so no save
