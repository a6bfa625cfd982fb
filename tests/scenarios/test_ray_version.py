"""A node type whose image carries another Ray: refused at enrollment, halted, never rented again.

Issue 15: "Ray and Python versions must match across the cluster". Ray refuses a worker node of
another Ray version (or Python version), so without a check every candidate would pull the image,
enroll, fail its `ray start`, end itself, and be replaced on another host, for as long as the
breaker lets it. Here the agent in each container reports the Ray and Python its image runs Ray
with (`fleetsim.agents`: the world's image `rayproject/ray:2.49.0-py310-cu121` runs Ray 2.49.0 on
Python 3.10.12, the heads run Ray 2.60.0 on Python 3.11.7), the head refuses the first candidate
that enrolls with the reason in plain words, halts the node type and ends its other candidate, a
person is alerted, and nothing is rented for it over the next hour. A spec that changes the
image lifts the halt.
"""

from __future__ import annotations

from dataclasses import replace

from fleetsim.harness import START, fleet
from reconciler.model.rayversions import RayVersions
from reconciler.model.requestrecord import RequestStatus
from reconciler.views import status, status_text
from tests.scenarios.world import (
    H,
    M,
    alive,
    cluster,
    dollars,
    ended_by,
    lines,
    rented,
    run,
    workers,
)

OLD = "rayproject/ray:2.49.0-py310-cu121"
NEW = "rayproject/ray:2.60.0-py311-cu124"
HEAD = RayVersions("2.60.0", "3.11.7")
SPEC = cluster("oldray", min_workers=1, factor=2, image=OLD)
REASON = (
    f"image {OLD} has Ray 2.49.0 (Python 3.10.12), the head runs Ray 2.60.0 (Python 3.11.7): "
    "Ray refuses a worker node of another Ray version"
)


def images() -> dict[str, RayVersions]:
    return {OLD: RayVersions("2.49.0", "3.10.12"), NEW: HEAD}


def test_one_slots_candidates_are_refused_the_node_type_halted_and_nothing_rented_after() -> None:
    with fleet(SPEC, versions=HEAD, images=images()) as f:
        run(f, START + 20 * M)
        # one request of one slot: its two candidates, and nothing else
        first = rented(f, "oldray")
        assert len(first) == SPEC.node_types["gpu"].candidate_factor == 2
        records = f.controller.records()
        (request,) = records.requests.values()
        assert request.image == OLD and request.status is not RequestStatus.OPEN
        assert request.slots[0].ended_without_worker

        # the first to enroll was refused with the reason; the head halted the node type
        (refused,) = lines(f, "ray_version_mismatch", "detection")
        assert REASON in refused["message"]
        halted = "Node type gpu is halted: no rental until its image or env changes"
        assert halted in refused["message"]
        halt = records.breakers["oldray/gpu"].halt
        assert halt is not None and halt.reason == REASON and halt.image == OLD
        agent = f.agent(refused["instance"])
        assert agent is not None and agent.ending is not None
        assert agent.ending.reason == "enroll_refused" and REASON in agent.ending.detail
        assert agent.enrolled_at is None and not workers(f, "oldray")

        # its other candidate was ended at once by the head (every host would fail the same
        # way), not left to pull, enroll and be refused in turn
        ends = ended_by(f)
        others = set(first) - {refused["instance"]}
        assert {ends[v] for v in others} == {"ray_version_mismatch"}
        assert ends[refused["instance"]] == "worker_report:enroll_refused"
        assert not alive(f, "oldray")

        # a person is alerted, once; `status` says it loudly
        assert [a.cls for a in records.alerts] == ["ray_version_mismatch"]
        view = status.build(
            records, [], [SPEC], lineage=f.controller.journal.lineage, serial=1,
            now=f.clock.now(), error=None,
        )  # fmt: skip
        (breaker,) = view["clusters"][0]["breakers"]
        assert breaker["halted"] and breaker["halt"]["reason"] == REASON
        text = status_text.human(view)
        assert "  HALTED gpu: no rentals since " in text and REASON in text
        assert "ray_version_mismatch" in text and "ALERT" in text

        # never retried on another host, and no host blamed for it
        halted_at = halt.at
        run(f, halted_at + 1 * H)
        assert rented(f, "oldray") == first
        assert max(first.values()) <= halted_at
        assert not f.controller.records().blocked_hosts("oldray", f.clock.now())
        assert not lines(f, "breaker_open")  # one slot counted, the halt does the stopping
        assert len(lines(f, "ray_version_mismatch", "detection")) == 1
        assert f.controller.records().breakers["oldray/gpu"].halt == halt
        # the meter: two candidates for their minutes of pulling, nothing since
        assert dollars(f, "oldray") < 2 * 0.5 * (20 * M / H)


def test_a_spec_with_an_image_of_the_heads_ray_lifts_the_halt() -> None:
    with fleet(SPEC, versions=HEAD, images=images()) as f:
        run(f, START + 20 * M)
        assert f.controller.records().breakers["oldray/gpu"].halt is not None
        before = set(rented(f, "oldray"))

        gpu = SPEC.node_types["gpu"]
        fixed = replace(SPEC, node_types={"gpu": replace(gpu, image=NEW)})
        f.controller.set_specs({"oldray": fixed})
        f.heads["oldray"].set_spec(fixed)
        run(f, f.clock.now() + 30 * M)

        records = f.controller.records()
        assert records.breakers["oldray/gpu"].halt is None
        (lifted,) = lines(f, "halt_lifted")
        assert f"{OLD} -> {NEW}" in lifted["message"]
        assert len(workers(f, "oldray")) == 1
        new = set(rented(f, "oldray")) - before
        assert new and all(f.sim.instance(v).image == NEW for v in new)
        enrolled = lines(f, "enrolled")
        assert enrolled and all(e["data"]["ray_version"] == "2.60.0" for e in enrolled)
