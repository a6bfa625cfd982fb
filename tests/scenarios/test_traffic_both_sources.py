"""Traffic from both sources, and idle windows per node type (issue 16).

The idle scanner reads Ray's view of each node (leased resources, actors, placement-group bundles)
and the agent's own live sample (GPU, the container's CPU, network); either one showing work is
traffic and clears both timers. Before issue 16 a cluster whose Ray was read looked at Ray alone:
a worker busy outside Ray (a download, a preprocessing script) with its Ray node idle was stopped
ten minutes in. And every node type had the cluster's windows; now a node type may declare its
own, as KubeRay's `idleTimeoutSeconds` per worker group.

Each scenario is the whole controller (`watch`'s signals as it builds them: `RayReaders` over a
scripted Ray, the agents' real heartbeats) against vastsim on virtual time.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetsim.harness import START, fleet
from reconciler.model.records import Records, Role
from reconciler.spec.text import spec_yaml
from tests.scenarios.world import (
    IMAGE,
    H,
    M,
    RayView,
    alive,
    cluster,
    ended_by,
    lines,
    read_by_ray,
    run,
    workers,
)
from tests.specs import load_spec

NAME = "both"


def during(*windows: tuple[float, float]) -> Callable[[float], bool]:
    return lambda now: any(START + a <= now < START + b for a, b in windows)


def ray_work(busy: Callable[[float], bool]) -> Callable[[float, Records], dict[str, bool]]:
    """Ray's view of every worker's node over time."""
    return lambda now, records: {
        r.id: busy(now) for r in records.instances.values() if r.role is Role.WORKER
    }


def stop_times(f: object, vast_id: int) -> list[float]:
    return [e["time"] for e in lines(f, "idle_stop", "decision") if e["instance"] == vast_id]  # type: ignore[arg-type]


def test_either_source_is_traffic_and_quiet_needs_both() -> None:
    """One worker, the default money chain (stop at 10 quiet minutes). Ray has work on it for the
    first 10 minutes and again from 40 to 70 (an actor holding state: no CPU); the container is
    busy outside Ray from 10 to 40 (a download: Ray's node idle). Quiet only from 70: stopped at
    80, not at 20 (Ray alone, the old reading) nor at 50 or 70 (the sample alone)."""
    spec = cluster(NAME, min_workers=0, max_workers=1, factor=1)
    ray = during((0, 10 * M), (40 * M, 70 * M))
    agent = during((0, 10 * M), (10 * M, 40 * M))
    with fleet(spec, working=agent) as f:
        view = RayView(
            f.clock,
            demand_at=lambda now: {(NAME, "gpu"): 1 if now < START + 5 * M else 0},
            work_at=ray_work(ray),
        )
        f.controller.signals = read_by_ray(f, {NAME: view})
        run(f, START + 8 * M)
        [vast_id] = workers(f, NAME)

        run(f, START + 79 * M)
        assert stop_times(f, vast_id) == []  # busy from one source or the other until 70
        assert f.sim.instance(vast_id).actual_status == "running"  # type: ignore[union-attr]
        run(f, START + 83 * M)
        [stopped] = stop_times(f, vast_id)
        assert START + 80 * M - 60 <= stopped <= START + 81 * M  # 10 quiet minutes after 70
        assert f.sim.instance(vast_id).actual_status == "stopped"  # type: ignore[union-attr]


def test_a_ray_read_cluster_whose_ray_cannot_be_read_is_never_quiet_on_the_sample_alone() -> None:
    """Ray unreadable for an hour while the container is quiet: unknown, never idle (an idle
    actor uses no CPU); the container's own traffic still clears the timers."""
    spec = cluster(NAME, min_workers=0, max_workers=1, factor=1)
    with fleet(spec, working=during((0, 10 * M))) as f:
        view = RayView(
            f.clock,
            demand_at=lambda now: {(NAME, "gpu"): 1 if now < START + 5 * M else 0},
            work_at=ray_work(during((0, 10 * M))),
            readable=lambda now: not (START + 10 * M <= now < START + 70 * M),
        )
        f.controller.signals = read_by_ray(f, {NAME: view})
        run(f, START + 8 * M)
        [vast_id] = workers(f, NAME)
        run(f, START + 70 * M)
        assert stop_times(f, vast_id) == []
        run(f, START + 85 * M)  # readable again at 70 and quiet: stopped 10 minutes later
        [stopped] = stop_times(f, vast_id)
        assert START + 80 * M - 60 <= stopped <= START + 81 * M


TWO_TYPES = spec_yaml(
    NAME,
    f"""\
max_dollars_per_hour: 5
node_types:
  brief:
    min_workers: 0
    max_workers: 1
    candidate_factor: 1
    image: {IMAGE}
    disk_gb: 10
    offer: {{filters: {{num_gpus: {{eq: 1}}}}}}
    idle_stop_after_seconds: 120
    idle_destroy_after_seconds: 300
  patient:
    min_workers: 0
    max_workers: 1
    candidate_factor: 1
    image: {IMAGE}
    disk_gb: 10
    offer: {{filters: {{num_gpus: {{eq: 1}}}}}}
""",
)


def test_each_node_type_has_its_own_idle_windows() -> None:
    """`brief` declares 2 and 5 quiet minutes; `patient` has the cluster's 10 and 30. Both go
    quiet at 10 minutes: brief stops at 12 and ends at 15, patient stops at 20 and ends at 40."""
    spec = load_spec(TWO_TYPES, f"{NAME}.yaml")
    assert spec.idle_windows("brief") == (120, 300)
    assert spec.idle_windows("patient") == (600, 1800)
    quiet_at = 10 * M
    with fleet(spec, working=during((0, quiet_at))) as f:
        view = RayView(
            f.clock,
            demand_at=lambda now: (
                {(NAME, "brief"): 1, (NAME, "patient"): 1} if now < START + 5 * M else {}
            ),
            work_at=ray_work(during((0, quiet_at))),
        )
        f.controller.signals = read_by_ray(f, {NAME: view})
        run(f, START + 8 * M)
        by_type = {
            r.node_type: r.vast_id
            for r in f.controller.records().instances.values()
            if r.role is Role.WORKER and r.vast_id is not None
        }
        brief, patient = by_type["brief"], by_type["patient"]
        run(f, START + 1 * H)
        [brief_stop] = stop_times(f, brief)
        [patient_stop] = stop_times(f, patient)
        assert START + quiet_at + 120 - 60 <= brief_stop <= START + quiet_at + 120 + 60
        assert START + quiet_at + 600 - 60 <= patient_stop <= START + quiet_at + 600 + 60
        ends = {
            e["instance"]: e["time"]
            for e in lines(f, "idle_destroy", "decision")
            if e["instance"] in (brief, patient)
        }
        assert START + quiet_at + 300 - 60 <= ends[brief] <= START + quiet_at + 300 + 60
        assert START + quiet_at + 1800 - 60 <= ends[patient] <= START + quiet_at + 1800 + 60
        assert ended_by(f)[brief] == ended_by(f)[patient] == "idle_destroy"
        assert alive(f, NAME) == set()
