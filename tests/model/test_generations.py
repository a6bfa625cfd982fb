"""A cluster's generation moves with its decisions, never with telemetry or other clusters."""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.generations import TELEMETRY, generation, generations, moved
from reconciler.model.records import Phase, Role
from tests.planning.builders import record, records

BASE = records(
    record("i1", vast_id=11, role=Role.WORKER, phase=Phase.SERVING),
    record("i2", cluster="c2", vast_id=12, role=Role.WORKER, phase=Phase.SERVING),
)


def test_heartbeats_listings_and_samples_leave_the_generation_alone() -> None:
    worker = BASE.instances["i1"]
    beaten = replace(
        worker,
        self_report_at=123.0,
        sample_at=123.0,
        sample_busy=True,
        provider_seen_at=120.0,
        provider_ok_at=120.0,
        probe_ok_at=121.0,
        listed_ip="198.51.100.7",
    )
    assert {"self_report_at", "sample_busy", "listed_ip"} <= TELEMETRY
    after = replace(BASE, instances={**BASE.instances, "i1": beaten})
    assert generation(after, "c1") == generation(BASE, "c1")


def test_a_decision_in_the_cluster_moves_it_and_only_it() -> None:
    before = generations(BASE, ["c1", "c2"])
    pinned = replace(BASE.instances["i1"], pinned=True, pinned_by="ann")
    after = replace(BASE, instances={**BASE.instances, "i1": pinned})
    assert moved(before, after) == ["c1"]
    rented = replace(BASE, instances={**BASE.instances, "i9": record("i9", cluster="c2")})
    assert moved(before, rented) == ["c2"]
    blocked = replace(BASE, blocklist={"c1": {}})  # an empty entry is no change
    assert moved(before, blocked) == []
