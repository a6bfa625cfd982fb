"""Each net as a table: it fires, and it refuses for each gate of the reaper, in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.nets import idle, lost, never_reported, went_silent
from reconciler.nets.base import NetResult
from reconciler.nets.detection import Detection
from reconciler.nets.reaper import Gate, Refusal, refusal
from reconciler.planning.react import react
from tests.planning.builders import LINEAGE, NOW, OTHER_LINEAGE, record, records, spec

SPEC = spec(min_workers=0)
SPECS = {SPEC.name: SPEC}
W = SPEC.watchdogs


def worker(**kw: object) -> InstanceRecord:
    base = record(
        "w1",
        vast_id=11,
        role=Role.WORKER,
        phase=Phase.ENROLLED,
        enrolled_at=NOW - 5000,
        self_report_at=NOW - 10,
        first_observed_at=NOW - 6000,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def booting(**kw: object) -> InstanceRecord:
    base = record(
        "c1", vast_id=12, phase=Phase.RUNNING, first_observed_at=NOW - W.never_reported_seconds - 1
    )
    return replace(base, **kw)  # type: ignore[arg-type]


Net = Callable[[list[InstanceRecord]], NetResult]


def run_went_silent(rs: list[InstanceRecord]) -> NetResult:
    return went_silent.run(rs, SPECS, lineage=LINEAGE, now=NOW)


def run_never_reported(rs: list[InstanceRecord]) -> NetResult:
    return never_reported.run(rs, SPECS, lineage=LINEAGE, now=NOW)


def run_auto_stop(rs: list[InstanceRecord]) -> NetResult:
    return idle.auto_stop(rs, SPECS, lineage=LINEAGE, now=NOW)


def run_auto_destroy(rs: list[InstanceRecord]) -> NetResult:
    return idle.auto_destroy(rs, SPECS, lineage=LINEAGE, now=NOW)


SILENT = worker(self_report_at=NOW - W.went_silent_after_seconds - 1)
SUSPECT = booting(boot_suspect_at=NOW - 60)
DUE_STOP = worker(stop_due_at=NOW - 1, destroy_due_at=NOW + 100)
DUE_DESTROY = worker(
    phase=Phase.STOPPED, intent=Intent.STOPPED, stop_due_at=NOW - 500, destroy_due_at=NOW - 1
)

# (net, a record it fires on, class, whether it is a heartbeat net (has the exempt gate))
NETS = {
    "went_silent": (run_went_silent, SILENT, "went_silent", True),
    "never_reported": (run_never_reported, SUSPECT, "never_reported", True),
    "auto_stop": (run_auto_stop, DUE_STOP, "idle_stop", False),
    "auto_destroy": (run_auto_destroy, DUE_DESTROY, "idle_destroy", False),
}


@pytest.mark.parametrize("name", list(NETS))
def test_fires(name: str) -> None:
    net, firing, cls, _ = NETS[name]
    result = net([firing])
    assert [(d.record, d.cls) for d in result.detections] == [(firing.id, cls)]


GATES = [
    ("not-ours", lambda r: replace(r, managed_by=OTHER_LINEAGE), Refusal.NOT_OURS),
    ("already-destroyed", lambda r: replace(r, phase=Phase.DESTROYED), None),
    ("pinned", lambda r: replace(r, pinned=True), Refusal.PINNED),
    ("exempt", lambda r: replace(r, exempt=True), Refusal.EXEMPT),
]


@pytest.mark.parametrize("name", list(NETS))
@pytest.mark.parametrize(("gate", "change", "expected"), GATES, ids=[g[0] for g in GATES])
def test_refuses(
    name: str,
    gate: str,
    change: Callable[[InstanceRecord], InstanceRecord],
    expected: Refusal | None,
) -> None:
    net, firing, _, heartbeat_net = NETS[name]
    result = net([change(firing)])
    if gate == "exempt" and not heartbeat_net:
        return  # the exempt class only excuses machines from the heartbeat nets
    assert result.detections == []
    if gate == "already-destroyed":
        assert result.refusals == [] and result.updates == {}  # not even scanned
    else:
        assert expected is not None
        assert result.refusals == [(firing.id, expected.value)]


def test_reaper_gate_order() -> None:
    """A record failing several gates is refused for the first one, in the seed's order."""
    r = worker(pinned=True, exempt=True, first_observed_at=NOW)
    gate = Gate(grace_seconds=100, heartbeat_net=True)
    assert refusal(None, lineage=LINEAGE, now=NOW, gate=gate) is Refusal.NOT_OURS
    assert (
        refusal(
            replace(r, managed_by=OTHER_LINEAGE, phase=Phase.DESTROYED),
            lineage=LINEAGE,
            now=NOW,
            gate=gate,
        )
        is Refusal.NOT_OURS
    )
    assert (
        refusal(replace(r, phase=Phase.DESTROYED), lineage=LINEAGE, now=NOW, gate=gate)
        is Refusal.ALREADY_DESTROYED
    )
    assert refusal(r, lineage=LINEAGE, now=NOW, gate=gate) is Refusal.PINNED
    assert refusal(replace(r, pinned=False), lineage=LINEAGE, now=NOW, gate=gate) is Refusal.EXEMPT
    assert (
        refusal(replace(r, pinned=False, exempt=False), lineage=LINEAGE, now=NOW, gate=gate)
        is Refusal.IN_GRACE
    )
    assert (
        refusal(
            replace(r, pinned=False, exempt=False, first_observed_at=NOW - 101),
            lineage=LINEAGE,
            now=NOW,
            gate=gate,
        )
        is None
    )


def test_went_silent_reads_only_the_workers_own_report() -> None:
    warm_elsewhere = replace(SILENT, provider_seen_at=NOW, probe_ok_at=NOW)
    assert [d.cls for d in run_went_silent([warm_elsewhere]).detections] == ["went_silent"]
    quiet_elsewhere = worker(provider_seen_at=NOW - 9999, probe_ok_at=None)
    assert run_went_silent([quiet_elsewhere]).detections == []


def test_never_reported_is_confirmed_on_a_second_tick() -> None:
    first = run_never_reported([booting()])
    assert first.detections == []
    noted = first.updates["c1"]
    assert noted.boot_suspect_at == NOW
    second = never_reported.run([noted], SPECS, lineage=LINEAGE, now=NOW + 60)
    assert [d.cls for d in second.detections] == ["never_reported"]


def test_never_reported_window_runs_from_our_first_observation() -> None:
    young = booting(first_observed_at=NOW - 60, boot_suspect_at=NOW - 60)
    assert run_never_reported([young]).detections == []
    assert (young.id, Refusal.IN_GRACE.value) in run_never_reported([young]).refusals


def test_lost_needs_all_three_channels_and_never_destroys() -> None:
    cold = worker(
        self_report_at=NOW - 999, provider_ok_at=NOW - 999, provider_seen_at=NOW, probe_ok_at=None
    )
    result = lost.run([cold], SPECS, lineage=LINEAGE, now=NOW)
    assert [d.cls for d in result.detections] == ["lost"]
    assert result.updates["w1"].lost is True
    for warm in ("self_report_at", "provider_ok_at", "probe_ok_at"):
        one_warm = replace(cold, **{warm: NOW})
        assert lost.run([one_warm], SPECS, lineage=LINEAGE, now=NOW).detections == []
    healed = lost.run([replace(cold, lost=True, probe_ok_at=NOW)], SPECS, lineage=LINEAGE, now=NOW)
    assert healed.updates["w1"].lost is False


def test_any_warm_channel_clears_the_lost_mark_and_a_cold_one_keeps_it() -> None:
    """A warm channel clears the mark (DESIGN.md 11): whichever one it is."""
    cold = worker(
        lost=True, self_report_at=NOW - 999, provider_ok_at=NOW - 999, probe_ok_at=NOW - 999
    )
    assert lost.run([cold], SPECS, lineage=LINEAGE, now=NOW).updates == {}  # still lost: kept
    for warm in ("self_report_at", "provider_ok_at", "probe_ok_at"):
        healed = lost.run([replace(cold, **{warm: NOW - 5})], SPECS, lineage=LINEAGE, now=NOW)
        assert healed.updates["w1"].lost is False, warm
        assert healed.detections == []


def test_a_lost_worker_is_routed_to_nothing_and_its_plan_ends_no_machine() -> None:
    cold = worker(self_report_at=NOW - 999, provider_ok_at=NOW - 999)
    found = lost.run([cold], SPECS, lineage=LINEAGE, now=NOW)
    state = records(found.updates["w1"])
    plan = react(state, found.detections, SPECS, lineage=LINEAGE, serial=1, now=NOW)
    assert plan.actions == ()


def test_went_silent_still_ends_a_lost_worker_whose_reports_stopped() -> None:
    silent = worker(lost=True, self_report_at=NOW - W.went_silent_after_seconds - 1)
    assert [d.cls for d in run_went_silent([silent]).detections] == ["went_silent"]


def test_the_money_chain_neither_arms_nor_ends_a_lost_worker() -> None:
    """Its quiet is not observed (Ray says no work of a node it cannot see) and a stop it cannot
    hear of ends as a destroy; traffic still clears its timers, with no condition."""
    quiet_lost = worker(lost=True)
    armed = idle.scan([quiet_lost], SPECS, busy={"w1": False}, lineage=LINEAGE, now=NOW)
    assert armed.updates == {}
    due = replace(DUE_STOP, lost=True)
    stop = run_auto_stop([due])
    assert stop.detections == [] and ("w1", idle.LOST) in stop.refusals
    due_destroy = replace(due, destroy_due_at=NOW - 1)
    destroy = run_auto_destroy([due_destroy])
    assert destroy.detections == [] and ("w1", idle.LOST) in destroy.refusals
    cleared = idle.scan([due], SPECS, busy={"w1": True}, lineage=LINEAGE, now=NOW).updates["w1"]
    assert cleared.stop_due_at is None and cleared.destroy_due_at is None


def test_a_lost_worker_does_not_hold_min_workers_for_a_quiet_one() -> None:
    """Out of rotation: the quiet worker in rotation is the one that keeps min_workers up."""
    keep = spec(min_workers=1)
    lost_one = worker(lost=True, self_report_at=NOW - 999)
    quiet = replace(DUE_STOP, id="w2", vast_id=12)
    result = idle.auto_stop([lost_one, quiet], {keep.name: keep}, lineage=LINEAGE, now=NOW)
    assert result.detections == [] and ("w2", "at-min-workers") in result.refusals


def test_idle_scan_arms_both_timers_stop_first() -> None:
    quiet = worker()
    result = idle.scan([quiet], SPECS, busy={"w1": False}, lineage=LINEAGE, now=NOW)
    armed = result.updates["w1"]
    assert armed.stop_due_at == NOW + W.idle_stop_after_seconds
    assert armed.destroy_due_at == NOW + W.idle_destroy_after_seconds
    assert armed.stop_due_at < armed.destroy_due_at


def test_idle_scan_does_not_arm_without_a_sample_or_when_pinned() -> None:
    assert idle.scan([worker()], SPECS, busy={}, lineage=LINEAGE, now=NOW).updates == {}
    pinned = worker(pinned=True)
    assert idle.scan([pinned], SPECS, busy={"w1": False}, lineage=LINEAGE, now=NOW).updates == {}


@pytest.mark.parametrize(
    "drift",
    [
        {"phase": Phase.PULLING},
        {"phase": Phase.STOPPED, "intent": Intent.STOPPED},
        {"role": Role.CANDIDATE},
        {"managed_by": OTHER_LINEAGE},
        {"lost": True, "pinned": True},
        {"phase": Phase.DESTROYING, "intent": Intent.DESTROYED},
    ],
    ids=["pulling", "stopped", "candidate", "not-ours", "lost-and-pinned", "destroying"],
)
def test_traffic_clears_both_timers_whatever_the_recorded_state(drift: dict[str, object]) -> None:
    drifted = replace(worker(stop_due_at=NOW + 5, destroy_due_at=NOW + 50), **drift)  # type: ignore[arg-type]
    result = idle.scan([drifted], SPECS, busy={"w1": True}, lineage=LINEAGE, now=NOW)
    cleared = result.updates["w1"]
    assert cleared.stop_due_at is None and cleared.destroy_due_at is None


def test_a_stopped_worker_whose_timers_traffic_cleared_gets_its_destroy_timer_again() -> None:
    """A last busy sample of the stopping container cleared both timers after vast's stop was
    called: the scan arms the destroy timer again behind the stop (a stopped disk bills), but not
    while the sample still shows traffic, nor for a machine not ours or pinned."""
    stopped = worker(phase=Phase.STOPPED, intent=Intent.STOPPED)
    again = idle.scan([stopped], SPECS, busy={}, lineage=LINEAGE, now=NOW).updates["w1"]
    gap = W.idle_destroy_after_seconds - W.idle_stop_after_seconds
    assert again.destroy_due_at == NOW + gap and again.stop_due_at is None
    assert idle.scan([stopped], SPECS, busy={"w1": True}, lineage=LINEAGE, now=NOW).updates == {}
    for other in (replace(stopped, managed_by=OTHER_LINEAGE), replace(stopped, pinned=True)):
        assert idle.scan([other], SPECS, busy={}, lineage=LINEAGE, now=NOW).updates == {}


def test_auto_destroy_needs_stopped_or_idle() -> None:
    armed_destroy_only = worker(stop_due_at=None, destroy_due_at=NOW - 1)
    assert run_auto_destroy([armed_destroy_only]).detections == []


def test_auto_stop_keeps_min_workers() -> None:
    keep = spec(min_workers=1)
    result = idle.auto_stop([DUE_STOP], {keep.name: keep}, lineage=LINEAGE, now=NOW)
    assert result.detections == [] and ("w1", "at-min-workers") in result.refusals


def test_two_quiet_workers_due_in_one_pass_do_not_both_go_below_min_workers() -> None:
    keep = spec(min_workers=1)
    other = replace(DUE_STOP, id="w2", vast_id=(DUE_STOP.vast_id or 0) + 1)
    for net in (idle.auto_stop, idle.auto_destroy):
        quiet = [DUE_STOP, other]
        if net is idle.auto_destroy:
            quiet = [replace(w, destroy_due_at=NOW - 1) for w in quiet]
        result = net(quiet, {keep.name: keep}, lineage=LINEAGE, now=NOW)
        assert len(result.detections) == 1, (net.__name__, result)
        assert [why for _, why in result.refusals] == ["at-min-workers"]


@pytest.mark.parametrize("name", list(NETS))
def test_destroyed_records_are_skipped_by_every_scan(name: str) -> None:
    net, firing, _, _ = NETS[name]
    dead = replace(firing, phase=Phase.DESTROYED, intent=Intent.DESTROYED)
    result = net([dead])
    assert result.detections == [] and result.updates == {} and result.refusals == []


def test_destroyed_records_get_no_timer_from_the_idle_scan() -> None:
    dead = worker(phase=Phase.DESTROYED, intent=Intent.DESTROYED)
    assert idle.scan([dead], SPECS, busy={"w1": False}, lineage=LINEAGE, now=NOW).updates == {}


def test_an_unknown_class_alerts_a_human_and_ends_nothing() -> None:
    state = records(worker())
    plan = react(
        state,
        [Detection("w1", "gpu_fell_off_the_bus", "Xid 79", 11)],
        SPECS,
        lineage=LINEAGE,
        serial=1,
        now=NOW,
    )
    assert plan.actions == ()
    (alert,) = plan.alerts
    assert (alert.cls, alert.record, alert.message) == ("gpu_fell_off_the_bus", "w1", "Xid 79")
    assert plan.alerts == (alert,)  # typed, for the log to say; never a note found by prefix
    assert not any("ALERT" in n.text for n in plan.notes)
