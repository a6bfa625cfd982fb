"""A node type halted by a permanent failure (its image runs a Ray or Python the head's Ray
refuses: the head decides it at enrollment) rents nothing, on the real planner, until its image
or env changes; the timed breaker goes on beside it without erasing it."""

from __future__ import annotations

from dataclasses import replace

from reconciler.model import rayversions
from reconciler.model.demand import scripted
from reconciler.model.observation import Observation
from reconciler.model.plan import ActionKind, Plan
from reconciler.model.records import BreakerState, Halt, Intent, Phase, Records, breaker_key
from reconciler.model.requestrecord import RequestStatus
from reconciler.model.spec import ClusterSpec
from tests.planning.builders import LINEAGE, NOW, offer, record, records, request, spec
from tests.planning.planned import plan

OFFERS = tuple(offer(i, 0.1 * i) for i in range(1, 12))
SPEC = spec(min_workers=2, factor=2)
GPU = SPEC.node_types["gpu"]
KEY = breaker_key("c1", "gpu")
REASON = (
    "image img has Ray 2.49.0 (Python 3.10.12), the head runs Ray 2.60.0 (Python 3.11.7): "
    "Ray refuses a worker node of another Ray version"
)
HALT = Halt(
    NOW - 60, "ray_version_mismatch", REASON, "img", rayversions.fingerprint("img", {}), "i1"
)


def plan_of(state: Records, s: ClusterSpec = SPEC, demand: int = 0) -> Plan:
    observation = Observation(
        listing=(),
        offers={(s.name, "gpu"): OFFERS},
        ray=scripted({s.name: s}, {(s.name, "gpu"): demand}),
    )
    return plan([s], observation, state, lineage=LINEAGE, serial=1, now=NOW)


def rents(p: Plan) -> list[str]:
    return [a.record or "" for a in p.actions if a.kind is ActionKind.RENT]


def test_a_halted_node_type_rents_nothing_whatever_is_asked_of_it() -> None:
    state = Records(breakers={KEY: BreakerState(halt=HALT)})
    p = plan_of(state, demand=4)  # min_workers 2, Ray asks for 4: still nothing
    assert rents(p) == []
    assert not p.records.requests  # not even a request is placed
    assert p.records.breakers[KEY].halt == HALT
    assert [(n.code, n.text) for n in p.notes if n.code == "halted"] == [
        ("halted", f"c1/gpu: halted: {REASON}")
    ]


def test_its_open_requests_fail_at_once_and_count_toward_the_breaker() -> None:
    # a request placed before the halt, its only candidate already refused and gone
    gone = record("i1", vast_id=1, phase=Phase.DESTROYED, intent=Intent.DESTROYED)
    state = replace(
        records(request(slots=2), gone),
        breakers={KEY: BreakerState(halt=HALT)},
    )
    p = plan_of(state)
    q1 = p.records.requests["q1"]
    assert q1.status is RequestStatus.FAILED and q1.ended_reason == "ray_version_mismatch"
    assert all(s.ended_without_worker for s in q1.slots)
    assert rents(p) == []
    assert [d.cls for d in p.detections] == ["slots_no_worker"]
    assert "halted node type gpu" in p.detections[0].detail
    # the two slots counted; the halt stays beside the count
    after = p.records.breakers[KEY]
    assert after.consecutive_empty == 2 and after.halt == HALT


def test_the_breaker_opening_keeps_the_halt() -> None:
    state = Records(
        requests={"q1": request(slots=1)},
        breakers={KEY: BreakerState(consecutive_empty=2, since=NOW - 300, halt=HALT)},
    )
    p = plan_of(state)
    after = p.records.breakers[KEY]
    assert after.paused_until is not None and after.halt == HALT
    assert [a.reason for a in p.actions if a.kind is ActionKind.PAUSE] == ["breaker_open"]


def test_a_new_image_lifts_the_halt_and_renting_resumes() -> None:
    fixed = replace(SPEC, node_types={"gpu": replace(GPU, image="rayproject/ray:2.60.0-py311")})
    state = Records(breakers={KEY: BreakerState(halt=HALT)})
    p = plan_of(state, fixed)
    assert p.records.breakers[KEY].halt is None
    (lifted,) = [d for d in p.detections if d.cls == "halt_lifted"]
    assert (
        "image changed" in lifted.detail and "img -> rayproject/ray:2.60.0-py311" in lifted.detail
    )
    assert lifted.cluster == "c1" and lifted.record == "i1"
    assert len(rents(p)) == 4  # min_workers 2, factor 2
    placed = next(iter(p.records.requests.values()))
    assert placed.image == "rayproject/ray:2.60.0-py311"
    assert placed.fingerprint == rayversions.fingerprint("rayproject/ray:2.60.0-py311", {})


def test_a_new_env_lifts_it_too() -> None:
    """`RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor` in the node type's env is a fix for a
    Python patch mismatch with the same image."""
    fixed = replace(
        SPEC,
        node_types={"gpu": replace(GPU, env={"RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor"})},
    )
    p = plan_of(Records(breakers={KEY: BreakerState(halt=HALT)}), fixed)
    assert p.records.breakers[KEY].halt is None
    assert any("its env changed" in d.detail for d in p.detections if d.cls == "halt_lifted")
    assert rents(p)


def test_another_node_type_is_not_held_by_the_halt() -> None:
    two = replace(SPEC, node_types={**SPEC.node_types, "cpu": replace(GPU, name="cpu")})
    observation = Observation(listing=(), offers={("c1", "gpu"): OFFERS, ("c1", "cpu"): OFFERS})
    state = Records(breakers={KEY: BreakerState(halt=HALT)})
    p = plan([two], observation, state, lineage=LINEAGE, serial=1, now=NOW)
    rented = {a.node_type for a in p.actions if a.kind is ActionKind.RENT}
    assert rented == {"cpu"}
