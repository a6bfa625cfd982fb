"""Heartbeats at scale: a heartbeat that only moves a worker's clocks is kept in memory and
written within `KEPT_CLOCKS_SECONDS`, and a watch that dies loses seconds of report clocks, never
a worker (the whole controller with its real journal on virtual time).

Every save writes the whole state. The head saved on every heartbeat: 20 workers beating every
30 s wrote the state 40 times a minute; at 1,000 workers a save took ~0.3 s here, 33 heartbeats a
second arrive, and the head could not keep up (bench/heartbeat_scale.py).
"""

from __future__ import annotations

from typing import Any

from fleetsim.harness import START, fleet
from reconciler import settings
from reconciler.model.records import Role
from tests.scenarios.world import M, cluster, ended_by, restart, run, workers

N = 20


def test_heartbeats_write_the_state_in_batches_and_a_restart_loses_no_worker() -> None:
    spec = cluster("beats", min_workers=N, max_workers=N, factor=1, cap=100.0)
    interval = float(spec.watchdogs.heartbeat_interval_seconds)
    with fleet(spec, working=lambda now: True) as f:  # busy: the money chain stops nothing
        run(f, START + 12 * M)
        assert len(workers(f, "beats")) >= N - 1  # vastsim's market fails a create or so
        store = f.controller.journal.store
        writes: list[float] = []
        write = store.write

        def counted(records: Any, *, based_on: Any) -> Any:
            writes.append(f.clock.now())
            return write(records, based_on=based_on)

        store.write = counted  # type: ignore[method-assign]
        run(f, START + 17 * M)
        # 5 minutes of N workers beating every 30 s: 200 heartbeats, each of which wrote the
        # whole state (the old head: 199 writes); now one write per `KEPT_CLOCKS_SECONDS`
        # carries them (and the ticks')
        beats = N * 5 * M / interval
        assert len(writes) <= 5 * M / settings.KEPT_CLOCKS_SECONDS + 10, (len(writes), beats)

        # the watch dies with clocks kept unwritten; the next one reads what was written
        now = f.clock.now()
        live = [r for r in f.controller.records().instances.values() if r.live]
        before = {r.id: r.self_report_at for r in live if r.role is Role.WORKER}
        machines = {r.vast_id for r in live if r.role is Role.WORKER}
        assert len(before) >= N - 1
        restart(f)
        after = f.controller.records().instances
        for rid, clock in before.items():
            assert clock is not None and after[rid].self_report_at is not None
            # a worker's last beat kept unwritten is lost, the one before it is not
            assert after[rid].self_report_at >= clock - interval - settings.KEPT_CLOCKS_SECONDS
            assert after[rid].self_report_at >= now - 2 * interval - settings.KEPT_CLOCKS_SECONDS
        run(f, START + 27 * M)  # past went-silent's 5 minutes
        assert machines <= workers(f, "beats")  # none ended
        assert not machines & set(ended_by(f))
