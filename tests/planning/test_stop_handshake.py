"""The controller's side of the money chain's stop handshake (DESIGN.md 11), pure: the auto-stop
net and the plan it leads to, the reconcile's finishing stops and listings, demand, traffic.

    quiet past the stop timer      asked: intent stopped, `stop_asked_at`, no call (stop_pending)
    asked, waiting                 nothing (not even a finishing stop, whatever vast lists)
    acknowledged                   STOP `idle_stop` (the controller drains the node first)
    unacknowledged past its window STOP `stop_unacknowledged` (no drain)
    work or a pin during it        called off: intent running, timers cleared, the agent told
    traffic during it              called off by the idle scanner's clearing
    demand during it               called off by the planner, nothing rented, no start
    exempt node type               STOP at once, as before
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.model import stopping
from reconciler.model.demand import scripted
from reconciler.model.observation import Observation
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.model.requestrecord import RequestStatus
from reconciler.nets import idle
from reconciler.planning import deadlines
from tests.planning.builders import LINEAGE, NOW, offer, record, records, request, row, spec
from tests.planning.planned import plan, react

SPEC = spec(min_workers=0, max_workers=3, factor=1)
SPECS = {SPEC.name: SPEC}
BEAT = float(SPEC.watchdogs.heartbeat_interval_seconds)
WINDOW = stopping.ACK_INTERVALS * BEAT + stopping.ACK_SLACK


def quiet(ident: str = "i1", vast_id: int = 11, **kw: object) -> InstanceRecord:
    """A serving worker quiet past its stop timer."""
    base = record(
        ident,
        vast_id=vast_id,
        role=Role.WORKER,
        phase=Phase.SERVING,
        slot_id=f"q1s{vast_id}",
        enrolled_at=NOW - 5000,
        self_report_at=NOW - 10,
        stop_due_at=NOW - 1,
        destroy_due_at=NOW + 1200,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def asked(at: float = NOW - 20, **kw: object) -> InstanceRecord:
    return replace(stopping.asked(quiet(), at), **kw)  # type: ignore[arg-type]


def step(
    *state: InstanceRecord, now: float = NOW
) -> tuple[list[tuple[str, str]], dict[str, InstanceRecord], list[str]]:
    """auto-stop, then the plan its findings lead to: (actions, records after, detections)."""
    found = idle.auto_stop(state, SPECS, lineage=LINEAGE, now=now)
    result = react(
        records(*state),
        found.detections,
        SPECS,
        lineage=LINEAGE,
        serial=1,
        now=now,
        instances=found.updates,
    )
    actions = [(a.kind.value, a.reason) for a in result.actions]
    return actions, dict(result.records.instances), [d.cls for d in result.detections]


def test_a_quiet_worker_is_asked_first_no_call() -> None:
    actions, after, found = step(quiet())
    assert actions == []
    record_ = after["i1"]
    assert record_.intent is Intent.STOPPED and record_.phase is Phase.SERVING
    assert record_.stop_asked_at == NOW and record_.stop_acked_at is None
    assert stopping.answer(record_) == stopping.PENDING
    assert found == ["idle_stop", stopping.ASKED_CLASS]


def test_asked_and_waiting_nothing_happens() -> None:
    actions, after, found = step(asked())
    assert actions == [] and found == [] and after["i1"] == asked()


def test_acknowledged_it_is_stopped_as_idle_stop_which_the_controller_drains() -> None:
    actions, _, found = step(asked(stop_acked_at=NOW - 5))
    assert actions == [("stop", idle.STOP)] and found == [idle.STOP]


def test_unacknowledged_past_its_window_it_is_stopped_without_the_drain() -> None:
    assert step(asked(at=NOW - WINDOW + 1))[0] == []
    actions, _, found = step(asked(at=NOW - WINDOW))
    assert actions == [("stop", stopping.UNACKNOWLEDGED)] and found == [stopping.UNACKNOWLEDGED]


@pytest.mark.parametrize("hold", [{"pinned": True}, {"pinned_by": "ann"}])
def test_work_or_a_pin_during_the_handshake_calls_the_stop_off(hold: dict[str, object]) -> None:
    actions, after, found = step(asked(stop_acked_at=NOW - 5, **hold))
    assert actions == [] and found == [stopping.CANCELLED_CLASS]
    back = after["i1"]
    assert back.intent is Intent.RUNNING and back.stop_asked_at is None
    assert back.stop_cancelled_at == NOW and back.stop_due_at is None
    assert stopping.answer(back) == stopping.CANCELLED


def test_traffic_during_the_handshake_calls_the_stop_off() -> None:
    result = idle.scan([asked()], SPECS, busy={"i1": True}, lineage=LINEAGE, now=NOW)
    back = result.updates["i1"]
    assert back.intent is Intent.RUNNING and back.stop_cancelled_at == NOW
    assert back.stop_due_at is None and back.destroy_due_at is None
    # once vast's stop is called it is not called off: the timers clear, the stop goes on
    called = replace(asked(), phase=Phase.STOPPING)
    result = idle.scan([called], SPECS, busy={"i1": True}, lineage=LINEAGE, now=NOW)
    assert result.updates["i1"].intent is Intent.STOPPED


def test_an_exempt_worker_is_stopped_at_once() -> None:
    actions, after, _ = step(quiet(exempt=True))
    assert actions == [("stop", idle.STOP)] and after["i1"].stop_asked_at is None


def reconcile(
    state: InstanceRecord, demand: int, status: str = "running"
) -> tuple[list[tuple[str, str, str | None]], InstanceRecord]:
    observation = Observation(
        listing=(row(state, actual_status=status),),
        offers={(SPEC.name, "gpu"): (offer(1, 0.30), offer(2, 0.40))},
        ray=scripted({SPEC.name: SPEC}, {(SPEC.name, "gpu"): demand}),
    )
    filled = request("q1", slots=1, workers=(state.id,), status=RequestStatus.FILLED)
    result = plan([SPEC], observation, records(state, filled), lineage=LINEAGE, serial=1, now=NOW)
    acts = [(a.kind.value, a.reason, a.record) for a in result.actions]
    return acts, result.records.instances[state.id]


def test_a_listing_during_the_handshake_neither_finishes_the_stop_nor_moves_the_phase() -> None:
    acts, after = reconcile(asked(), demand=0)
    assert acts == []
    assert after.phase is Phase.SERVING and stopping.in_handshake(after)
    # once called, a stop vast has not carried out is finished as before
    acts, after = reconcile(replace(asked(), phase=Phase.STOPPING), demand=0)
    assert acts == [("stop", "finish_stop", "i1")]


def test_a_worker_in_the_handshake_is_capacity_and_demand_alone_calls_nothing_off() -> None:
    """Its Ray runs until the drain: demand that counts it rents nothing and leaves the stop to
    go on; work that Ray places on it is traffic, which calls the stop off (the idle scanner).
    The fleet benchmark: a demand reading that counted the quiet worker itself called 138 stops
    off and idle waste went from 1.03x to 1.69x of its floor."""
    acts, after = reconcile(asked(stop_acked_at=NOW - 5), demand=1)
    assert acts == []
    assert stopping.in_handshake(after) and after.stop_cancelled_at is None


def test_demand_after_the_call_waits_for_the_acknowledged_stop_and_rents_nothing() -> None:
    called = replace(asked(stop_acked_at=NOW - 5), phase=Phase.STOPPING, retry_at=NOW + 30)
    acts, after = reconcile(called, demand=1)
    assert acts == [] and after.intent is Intent.STOPPED  # started once stopped


def test_the_handshake_wakes_the_auto_stop_net() -> None:
    waiting = asked(at=NOW - 20)
    assert deadlines.net_deadlines([waiting], SPEC)["auto_stop"] == NOW - 20 + WINDOW
    acked = asked(at=NOW - 20, stop_acked_at=NOW - 3)
    assert deadlines.net_deadlines([acked], SPEC)["auto_stop"] == NOW - 1  # its stop timer


def test_the_stop_is_asked_a_heartbeat_ahead_and_called_at_the_timer() -> None:
    """So the acknowledgment is in when the timer falls due (the fleet benchmark: asked at the
    timer, every idle stop came up to 30 s late)."""
    interval = SPEC.watchdogs.heartbeat_interval_seconds
    soon = quiet(stop_due_at=NOW + interval - 5)
    assert deadlines.net_deadlines([soon], SPEC)["auto_stop"] == NOW + interval - 5 - interval
    found = idle.auto_stop([soon], SPECS, lineage=LINEAGE, now=NOW)
    assert [d.cls for d in found.detections] == ["idle_stop"]  # the ask
    early = replace(stopping.asked(soon, NOW), stop_acked_at=NOW + 2)
    waiting = idle.auto_stop([early], SPECS, lineage=LINEAGE, now=NOW + 10)
    assert waiting.detections == [] and waiting.updates == {}
    due = idle.auto_stop([early], SPECS, lineage=LINEAGE, now=NOW + interval - 5)
    assert [d.cls for d in due.detections] == ["idle_stop"]
