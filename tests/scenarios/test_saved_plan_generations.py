"""A saved plan outlives a running watch's chatter (issue 23, "watch makes every saved plan stale
within seconds"): ten minutes of heartbeats, samples and listings of a busy cluster move the
state's serial all the time, and its generation not at all, so a plan of it stays appliable; a
decision (a machine ended) moves it."""

from __future__ import annotations

from fleetsim.harness import START, fleet
from reconciler.model.generations import generation
from tests.scenarios.world import M, cluster, run, workers


def test_ten_minutes_of_heartbeats_leave_a_busy_clusters_generation_alone() -> None:
    spec = cluster("busy", min_workers=2, max_workers=2, factor=1)
    with fleet(spec, working=lambda now: True) as f:
        run(f, START + 15 * M)
        assert len(workers(f, "busy")) == 2
        before, serial = generation(f.controller.records(), "busy"), f.controller.journal.serial
        run(f, START + 25 * M)
        assert f.controller.journal.serial > serial  # the state moved on, heartbeat by heartbeat
        assert generation(f.controller.records(), "busy") == before
