"""`ray-vast status`: what holds each machine (Ray's work, a person's pin), the alerts waiting for
a person, and the rent-loop breakers, in the human view and in versioned JSON.

Regenerate the golden files after a deliberate change with
`RAY_VAST_UPDATE_GOLDEN=1 pytest tests/views`, then read the diff before committing it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from reconciler.model import rayversions
from reconciler.model.applied import downed
from reconciler.model.evolve import evolve
from reconciler.model.records import (
    Alert,
    BreakerState,
    ClusterRecord,
    Halt,
    Intent,
    Phase,
    Records,
    Role,
)
from reconciler.views import status, status_text
from tests.planning.builders import LINEAGE, NOW, OTHER_LINEAGE, record, row, spec

from .test_plan_golden import compare

GOLDEN = Path(__file__).parent / "golden"
SPEC = spec(name="c1", cap=10.0, extra="breaker: {slots: 3, pause_seconds: 600}\n")
HOUR = 3600.0


def situation() -> tuple[Records, list[Any]]:
    """NOW is 2027-01-15 08:00 UTC."""
    serving = {"role": Role.WORKER, "phase": Phase.SERVING, "request": None}
    instances = {
        "i1": record("i1", vast_id=101, pinned=True, **serving),
        "i2": record(
            "i2", vast_id=102, pinned_by="alice@box", pinned_until=NOW + 2 * HOUR, **serving
        ),
        "i3": record("i3", vast_id=103, pinned_by="bob@box (eval run)", **serving),
        "i4": record("i4", vast_id=104, pinned_by="carol@box", pinned_until=NOW - 60, **serving),
        "i5": record(
            "i5",
            vast_id=105,
            pinned=True,
            pinned_by="dan@box",
            pinned_until=NOW + 30 * HOUR,
            **serving,
        ),
        "i6": record("i6", vast_id=106, **serving),
        "i7": record(
            "i7", vast_id=107, stop_due_at=NOW + 300, destroy_due_at=NOW + 1500, **serving
        ),
        "i8": record(
            "i8",
            vast_id=108,
            role=Role.WORKER,
            phase=Phase.STOPPED,
            intent=Intent.STOPPED,
            request=None,
            stop_due_at=NOW - 300,
            destroy_due_at=NOW + 900,
        ),
    }
    records = Records(
        instances=instances,
        breakers={
            "c1/gpu": BreakerState(consecutive_empty=0, paused_until=NOW + 600),
            "c1/cpu": BreakerState(consecutive_empty=2),
            "c1/old": BreakerState(consecutive_empty=0, paused_until=NOW - 5),  # nothing to show
        },
        alerts=(
            Alert(NOW - 120, "c1", "token_check_failed", "instance 999: token check failed", None),
            Alert(NOW - 60, "c1", "bad_agent_message", "enroll: malformed message refused", "i6"),
            Alert(NOW - 30, "gone", "mystery", "a class nobody routed", None),
        ),
    )
    foreign = record("i9", cluster="c1", vast_id=909, lineage=OTHER_LINEAGE)
    listing = [row(r) for r in instances.values()] + [row(foreign)]
    return records, listing


def view() -> dict[str, Any]:
    records, listing = situation()
    return status.build(records, listing, [SPEC], lineage=LINEAGE, serial=7, now=NOW, error=None)


def test_human_status() -> None:
    compare(GOLDEN / "status_holds_alerts_breakers.txt", status_text.human(view()))


def test_json_status() -> None:
    text = json.dumps(view(), indent=2, sort_keys=True) + "\n"
    compare(GOLDEN / "status_holds_alerts_breakers.json", text)


def by_record(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["record"]: i for c in payload["clusters"] for i in c["instances"]}


def test_each_instance_says_whether_it_is_held_and_why() -> None:
    rows = by_record(view())
    assert {r: (i["held"], i["held_because"]) for r, i in rows.items()} == {
        "i1": (True, ["ray_work"]),
        "i2": (True, ["person"]),
        "i3": (True, ["person"]),
        "i4": (False, []),  # the pin ended a minute ago
        "i5": (True, ["ray_work", "person"]),
        "i6": (False, []),
        "i7": (False, []),
        "i8": (False, []),
    }
    assert (rows["i2"]["pinned_by"], rows["i2"]["pinned_until"]) == ("alice@box", NOW + 2 * HOUR)
    text = status_text.human(view())
    line = {r: next(x for x in text.splitlines() if x.startswith(f"  {r} ")) for r in rows}
    assert line["i1"].endswith("[pinned: ray work]")
    assert line["i2"].endswith("[pinned by alice@box until 10:00 UTC]")
    assert line["i3"].endswith("[pinned by bob@box (eval run)]")
    assert line["i4"].endswith("[pin by carol@box ended 07:59 UTC]")
    assert line["i5"].endswith("[pinned: ray work] [pinned by dan@box until 2027-01-16 14:00 UTC]")
    assert line["i6"].endswith("/h")
    # the money chain's timers: when a quiet worker stops and ends, and when a stopped one ends
    assert line["i7"].endswith("[quiet: stop 08:05 UTC, destroy 08:25 UTC]")
    assert line["i8"].endswith("[stopped: destroy 08:15 UTC]")
    assert (rows["i7"]["stop_due_at"], rows["i7"]["destroy_due_at"]) == (NOW + 300, NOW + 1500)
    assert rows["i6"]["stop_due_at"] is None and rows["i6"]["sample_busy"] is None


def test_alerts_and_breakers_are_shown_with_their_cluster() -> None:
    payload = view()
    clusters = {c["name"]: c for c in payload["clusters"]}
    # a cluster that has only an alert left is listed, so the alert is not lost
    assert set(clusters) == {"c1", "gone"}
    assert [a["class"] for a in clusters["c1"]["alerts"]] == [
        "token_check_failed",
        "bad_agent_message",
    ]
    assert [a["class"] for a in payload["alerts"]] == [
        "token_check_failed",
        "bad_agent_message",
        "mystery",
    ]
    breakers = {b["node_type"]: b for b in clusters["c1"]["breakers"]}
    assert breakers["gpu"]["paused"] and breakers["gpu"]["paused_until"] == NOW + 600
    assert not breakers["cpu"]["paused"] and breakers["cpu"]["consecutive_empty"] == 2
    assert not breakers["old"]["paused"]
    assert {b["trips_after"] for b in breakers.values()} == {3}
    text = status_text.human(payload)
    assert (
        "  breaker gpu: launches paused until 08:10 UTC: 3 slots in a row ended with no worker\n"
        in text
    )
    assert "  breaker cpu: 2 of 3 slots in a row ended with no worker" in text
    assert "breaker old" not in text
    assert "  ALERT 2027-01-15 07:58:00 UTC token_check_failed: instance 999" in text
    assert "  ALERT 2027-01-15 07:59:00 UTC bad_agent_message i6: enroll" in text


def test_without_specs_the_breaker_threshold_is_unknown_and_said_so() -> None:
    records, listing = situation()
    payload = status.build(records, listing, [], lineage=LINEAGE, serial=7, now=NOW, error=None)
    text = status_text.human(payload)
    assert (
        "  breaker gpu: launches paused until 08:10 UTC: the breaker's number of slots in a row "
        "ended with no worker\n" in text
    )
    assert "  breaker cpu: 2 slots in a row ended with no worker\n" in text


def test_the_human_view_shows_a_clusters_newest_alerts_and_counts_the_rest() -> None:
    alerts = tuple(Alert(NOW - 100 + i, "c1", "mystery", f"number {i}") for i in range(13))
    payload = status.build(
        Records(alerts=alerts), [], [SPEC], lineage=LINEAGE, serial=1, now=NOW, error=None
    )
    text = status_text.human(payload)
    assert "3 older alert(s) not shown" in text
    assert "number 2\n" not in text and "number 3\n" in text and "number 12\n" in text
    assert len(payload["clusters"][0]["alerts"]) == 13  # --json has every one


def test_json_is_version_1_7_and_keeps_every_earlier_field() -> None:
    payload = view()
    assert payload["format_version"] == "1.7"
    assert all("held_down_at" in cluster for cluster in payload["clusters"])
    assert payload["clusters"][0]["scheduling"] == "ray"
    assert payload["clusters"][0]["chosen"] == []
    head = SPEC.head
    assert payload["clusters"][0]["ray"] == {
        "address": f"{head.address}:{head.ray_port}",
        "dashboard": f"http://{head.address}:{head.dashboard_port}",
    }
    assert f"dashboard and Jobs API http://{head.address}:" in status_text.human(payload)
    v11_breaker = {"node_type", "paused", "paused_until", "consecutive_empty", "trips_after"}
    for cluster in payload["clusters"]:
        for breaker in cluster["breakers"]:
            assert v11_breaker | {"halted", "halt"} <= set(breaker)
    assert payload["generated_at"] == NOW
    v10_top = {"format_version", "lineage", "serial", "listing_error", "alerts", "clusters"}
    assert v10_top <= set(payload)
    v10_instance = {
        "record",
        "node_type",
        "vast_id",
        "role",
        "phase",
        "intent",
        "vast_status",
        "age_seconds",
        "dollars_per_hour",
        "host_id",
        "label",
        "lost",
        "pinned",
    }
    for instance in by_record(payload).values():
        assert v10_instance <= set(instance)
    # `pinned` keeps its 1.0 meaning: Ray reports work on the node (not a person's pin)
    assert [r for r, i in by_record(payload).items() if i["pinned"]] == ["i1", "i5"]


def test_a_halted_node_type_is_shown_loudly_until_its_image_changes() -> None:
    reason = (
        "image rayproject/ray:2.49.0-py310 has Ray 2.49.0 (Python 3.10.12), the head runs "
        "Ray 2.60.0 (Python 3.11.7): Ray refuses a worker node of another Ray version"
    )
    gpu = SPEC.node_types["gpu"]
    halt = Halt(
        NOW - 300,
        "ray_version_mismatch",
        reason,
        "rayproject/ray:2.49.0-py310",
        rayversions.fingerprint(gpu.image, gpu.env),
        "i7",
    )
    records = Records(
        breakers={"c1/gpu": BreakerState(consecutive_empty=1, halt=halt)},
        alerts=(Alert(NOW - 300, "c1", "ray_version_mismatch", f"refused: {reason}", "i7"),),
    )
    payload = status.build(records, [], [SPEC], lineage=LINEAGE, serial=3, now=NOW, error=None)
    (breaker,) = payload["clusters"][0]["breakers"]
    assert breaker["halted"] is True
    assert breaker["halt"] == {
        "at": NOW - 300,
        "class": "ray_version_mismatch",
        "reason": reason,
        "image": "rayproject/ray:2.49.0-py310",
        "record": "i7",
    }
    text = status_text.human(payload)
    assert (
        f"  HALTED gpu: no rentals since 07:55 UTC, until its image or env changes: {reason}\n"
        in text
    )
    assert "  breaker gpu: 1 of 3 slots in a row ended with no worker\n" in text
    assert "ALERT 2027-01-15 07:55:00 UTC ray_version_mismatch i7: refused: image" in text

    # the spec now names another image: the halt no longer holds (the planner lifts it)
    changed = replace(SPEC, node_types={"gpu": replace(gpu, image="rayproject/ray:2.60.0")})
    payload = status.build(records, [], [changed], lineage=LINEAGE, serial=3, now=NOW, error=None)
    (breaker,) = payload["clusters"][0]["breakers"]
    assert breaker["halted"] is False and breaker["halt"]["reason"] == reason
    assert "  halt gpu: its image or env changed; launches resume" in status_text.human(payload)


def test_a_quiet_worker_that_min_workers_keeps_says_so_not_when_it_would_stop() -> None:
    """The first build's status said `quiet: stop 15:40 UTC` of the one worker `min_workers: 1`
    keeps up, a stop that never comes (auto-stop refuses it: at-min-workers)."""
    serving = {"role": Role.WORKER, "phase": Phase.SERVING, "request": None}
    quiet = {"stop_due_at": NOW + 300, "destroy_due_at": NOW + 1500, **serving}
    alone = Records(instances={"i1": record("i1", vast_id=101, **quiet)})
    two = Records(
        instances={
            "i1": record("i1", vast_id=101, **quiet),
            "i2": record("i2", vast_id=102, **quiet),
        }
    )
    one_kept = spec(name="c1", min_workers=1)

    def rows(records: Records) -> dict[str, dict[str, Any]]:
        view = status.build(
            records, None, [one_kept], lineage=LINEAGE, serial=1, now=NOW, error=None
        )
        return by_record(view) | {"_text": {"text": status_text.human(view)}}

    kept = rows(alone)
    assert kept["i1"]["kept_at_min_workers"] is True
    assert "[quiet: kept by min_workers]" in kept["_text"]["text"]
    assert "stop 08:05" not in kept["_text"]["text"]
    # two quiet workers of a type that keeps one: either may be stopped, so both say when
    both = rows(two)
    assert not both["i1"]["kept_at_min_workers"] and not both["i2"]["kept_at_min_workers"]
    assert both["_text"]["text"].count("[quiet: stop 08:05 UTC, destroy 08:25 UTC]") == 2


def test_a_worker_vast_shows_stopped_bills_storage_before_the_records_catch_up() -> None:
    """Tried as a new user: `status` showed a worker that vast already listed as stopped (its
    record still `stopping`) at its full $0.057/h, and the cluster's total with it."""
    stopping = record(
        "i1",
        vast_id=101,
        role=Role.WORKER,
        phase=Phase.STOPPING,
        intent=Intent.STOPPED,
        request=None,
        dph_total=0.5,
        storage_dph=0.01,
    )
    records = Records(instances={"i1": stopping})
    listed = [row(stopping, actual_status="stopped", intended_status="stopped")]
    view = status.build(records, listed, [SPEC], lineage=LINEAGE, serial=1, now=NOW, error=None)
    assert by_record(view)["i1"]["dollars_per_hour"] == 0.01
    assert view["dollars_per_hour"] == 0.01
    running = status.build(
        records, [row(stopping)], [SPEC], lineage=LINEAGE, serial=1, now=NOW, error=None
    )
    assert by_record(running)["i1"]["dollars_per_hour"] == 0.5  # a stop under way bills in full


def test_a_cluster_down_holds_down_says_so_and_since_when() -> None:
    records = downed(
        evolve(Records(), clusters={SPEC.name: ClusterRecord(SPEC.name, SPEC.digest)}),
        SPEC.name,
        NOW - 600,
    )
    args = {"lineage": LINEAGE, "serial": 1, "now": NOW, "error": None}
    payload = status.build(records, [], [SPEC], **args)
    (cluster,) = payload["clusters"]
    assert cluster["held_down_at"] == NOW - 600
    assert "held down by `ray-vast down` since" in status_text.human(payload)
    changed = replace(SPEC, digest="another")  # its spec changed since: no longer held
    (cluster,) = status.build(records, [], [changed], **args)["clusters"]
    assert cluster["held_down_at"] is None
