"""The planner's side of a deliberate stop (DESIGN.md 10), as a table: demand that returns before
the destroy timer starts a worker the head stopped deliberately instead of renting; its intent is
running again in the plan's records (before the call to vast: what lets its agent resume); a
start vast does not carry out within `start_limit_seconds` ends the machine and a rental replaces
it. A stop that was not answered as deliberate (the agent destroyed itself) is never started.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from reconciler.model.demand import scripted
from reconciler.model.observation import Observation
from reconciler.model.observed import Instance
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.planning import deadlines
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

SPEC = spec(min_workers=0, max_workers=3, factor=1)
OFFERS = [offer(1, 0.30), offer(2, 0.40), offer(3, 0.50)]
LIMIT = SPEC.watchdogs.start_limit_seconds
Act = tuple[str, str, str | None]


def stopped(ident: str, vast_id: int, **kw: object) -> InstanceRecord:
    """A worker the money chain stopped, whose agent kept its disk (the head said so)."""
    base = record(
        ident,
        vast_id=vast_id,
        role=Role.WORKER,
        phase=Phase.STOPPED,
        intent=Intent.STOPPED,
        slot_id=f"q1s{vast_id}",
        enrolled_at=NOW - 5000,
        self_report_at=NOW - 1200,
        stopped_deliberately_at=NOW - 1200,
        stop_due_at=NOW - 1200,
        destroy_due_at=NOW + 600,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def serving(ident: str, vast_id: int) -> InstanceRecord:
    return record(
        ident,
        vast_id=vast_id,
        role=Role.WORKER,
        phase=Phase.SERVING,
        slot_id=f"q1s{vast_id}",
        enrolled_at=NOW - 5000,
        self_report_at=NOW - 10,
    )


def listed(rec: InstanceRecord, status: str = "stopped", **kw: object) -> Instance:
    return row(rec, actual_status=status, **kw)  # type: ignore[arg-type]


@dataclass
class Case:
    state: list[InstanceRecord]
    demand: int
    expect: list[Act]
    statuses: dict[str, str] = field(default_factory=dict)  # record -> vast's status
    check: Callable[[Plan], None] | None = None
    cap: float = 10.0


def run(case: Case) -> Plan:
    listing = tuple(
        listed(r, case.statuses.get(r.id, "stopped" if r.phase is Phase.STOPPED else "running"))
        for r in case.state
    )
    given = replace(SPEC, max_dollars_per_hour=case.cap)
    observation = Observation(
        listing=listing,
        offers={(SPEC.name, "gpu"): tuple(OFFERS)},
        ray=scripted({SPEC.name: given}, {(SPEC.name, "gpu"): case.demand}),
    )
    ids = tuple(r.id for r in case.state)
    filled = request("q1", slots=len(ids), workers=ids, status=RequestStatus.FILLED)
    state = records(*case.state, filled)
    return plan([given], observation, state, lineage=LINEAGE, serial=1, now=NOW)


def acts(result: Plan) -> list[Act]:
    return [(a.kind.value, a.reason, a.record) for a in result.actions]


def started_again(result: Plan) -> None:
    after = result.records.instances["i1"]
    assert after.intent is Intent.RUNNING  # recorded before the call: its resume is let in
    assert after.start_requested_at == NOW
    assert after.stop_due_at is None and after.destroy_due_at is None
    [start] = result.actions
    assert start.dph_delta == pytest.approx(0.5 - 0.01)  # it bills its storage already


CASES = {
    "demand returns: the stopped worker is started, nothing rented": Case(
        [stopped("i1", 11)], 1, [("start", "resume", "i1")], check=started_again
    ),
    "more demand than stopped workers: start them, rent the rest": Case(
        [stopped("i1", 11)], 2, [("start", "resume", "i1"), ("rent", "scale_up", "i101")]
    ),
    "two stopped, one wanted: the latest stopped one is started": Case(
        [stopped("i1", 11, stopped_deliberately_at=NOW - 2000), stopped("i2", 12)],
        1,
        [("start", "resume", "i2")],
    ),
    "no demand: it stays stopped": Case([stopped("i1", 11)], 0, []),
    "demand met by the serving workers: the stopped one stays stopped": Case(
        [serving("i3", 13), stopped("i1", 11)], 1, []
    ),
    "its stop not yet confirmed by vast: nothing rented, started once stopped": Case(
        [stopped("i1", 11, phase=Phase.STOPPING, retry_at=NOW + 100)], 1, []
    ),
    "the agent did not keep its disk (no deliberate stop): rent instead": Case(
        [stopped("i1", 11, stopped_deliberately_at=None)], 1, [("rent", "scale_up", "i101")]
    ),
    "another state's stopped worker is not ours to start": Case(
        [stopped("i1", 11, managed_by=OTHER_LINEAGE)], 1, [("rent", "scale_up", "i101")]
    ),
    "a start over the cap waits: nothing rented either": Case([stopped("i1", 11)], 1, [], cap=0.3),
    "being destroyed (the money chain's destroy timer): not started": Case(
        [stopped("i1", 11, intent=Intent.DESTROYED, phase=Phase.DESTROYING, retry_at=NOW + 9)],
        1,
        [("rent", "scale_up", "i101")],
        statuses={"i1": "stopped"},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_demand_and_a_stopped_worker(name: str) -> None:
    case = CASES[name]
    result = run(case)
    assert acts(result) == case.expect
    if case.check is not None:
        case.check(result)


# --- a start vast does not carry out ---------------------------------------------------------


def starting(since: float, status: str = "scheduling") -> tuple[InstanceRecord, Instance]:
    rec = stopped(
        "i1",
        11,
        intent=Intent.RUNNING,
        phase=Phase.PULLING,
        start_requested_at=NOW - since,
        stop_due_at=None,
        destroy_due_at=None,
    )
    return rec, listed(rec, status, status_msg="Waiting for GPUs to become available")


def planned(rec: InstanceRecord, seen: Instance, demand: int = 1) -> Plan:
    observation = Observation(
        listing=(seen,),
        offers={(SPEC.name, "gpu"): tuple(OFFERS)},
        ray=scripted({SPEC.name: SPEC}, {(SPEC.name, "gpu"): demand}),
    )
    state = records(rec, request("q1", slots=1, workers=(rec.id,), status=RequestStatus.FILLED))
    return plan([SPEC], observation, state, lineage=LINEAGE, serial=1, now=NOW)


def test_a_start_within_its_limit_is_waited_for() -> None:
    result = planned(*starting(LIMIT - 1))
    assert acts(result) == []  # no replacement rented while the start may still come
    assert result.records.instances["i1"].intent is Intent.RUNNING


def test_a_start_stuck_past_its_limit_is_destroyed_and_replaced_by_a_rental() -> None:
    result = planned(*starting(LIMIT))
    assert acts(result) == [("destroy", "start_stuck", "i1"), ("rent", "scale_up", "i101")]
    [found] = [d for d in result.detections if d.cls == "start_stuck"]
    assert "scheduling" in found.detail and "Waiting for GPUs" in found.detail
    assert f"limit {LIMIT}s" in found.detail


def test_a_start_still_listed_stopped_past_its_limit_is_stuck_too() -> None:
    rec, seen = starting(LIMIT + 60, status="stopped")
    result = planned(rec, seen)
    assert ("destroy", "start_stuck", "i1") in acts(result)


def test_a_start_that_ran_has_no_limit() -> None:
    rec, _ = starting(LIMIT * 10)
    resumed = replace(rec, phase=Phase.SERVING, start_requested_at=None, self_report_at=NOW - 5)
    result = planned(resumed, listed(resumed, "running"))
    assert acts(result) == []


def test_the_controller_lists_when_a_start_is_due_to_be_stuck() -> None:
    rec, _ = starting(10)
    due = deadlines.next_listing([rec], [], SPEC, after=NOW)
    assert due == NOW - 10 + LIMIT


def test_the_went_silent_clock_of_a_started_worker_runs_from_its_start() -> None:
    rec, _ = starting(10)
    running = replace(rec, phase=Phase.ENROLLED)  # vast says running; the agent not back yet
    found = deadlines.net_deadlines([running], SPEC)
    assert found["went_silent"] == NOW - 10 + SPEC.watchdogs.went_silent_after_seconds


def test_a_stopped_worker_is_not_counted_as_capacity_until_started() -> None:
    result = run(Case([stopped("i1", 11)], 1, []))
    assert result.records.instances["i1"].intent is Intent.RUNNING
    assert isinstance(result.records, Records)
    assert [a.kind for a in result.actions] == [ActionKind.START]
