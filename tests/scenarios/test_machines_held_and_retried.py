"""Pins hold machines; destroys and stops that vast refuses are sent again until it confirms;
lost workers leave rotation.

Finding 4 of issue 12: nothing set `pinned` and there was no `ray-vast pin`, so scale-down and the
silence nets could end a machine that held work. Finding 6: a failed destroy of a removed
cluster's instance was never retried, a failed stop was never re-sent and was priced as storage.
Finding 8: lost workers counted as capacity. (They were then drained through Ray, which ends an idle
raylet; issue 21 point 5 took that out: a lost worker is out of rotation by not being capacity.)
"""

from __future__ import annotations

import logging
from pathlib import Path

from fleetsim.agents import ContainerFault, Span
from fleetsim.harness import START, fleet
from reconciler.model.orders import PinOrder
from reconciler.model.records import Intent, Phase
from reconciler.state import orders
from reconciler.watch.orders import take_orders
from tests.scenarios.world import (
    H,
    M,
    Signals,
    alive,
    cluster,
    dollars,
    ended_by,
    ledger,
    lines,
    run,
    workers,
)

DELETE = "DELETE /api/v0/instances/{id}/"
STOP = "PUT /api/v0/instances/{id}/"


def test_a_quiet_machine_that_is_pinned_is_neither_stopped_nor_destroyed(tmp_path: Path) -> None:
    spec = cluster("held", min_workers=0, max_workers=2, factor=1)
    with fleet(spec, working=lambda now: False) as f:
        f.controller.signals = Signals(
            f.clock, demand_at=lambda now: {("held", "gpu"): 2 if now < START + 10 * M else 0}
        )
        run(f, START + 8 * M)
        a, b = sorted(workers(f, "held"))
        # `ray-vast pin A --for 2h` while watch runs: the order goes to watch's mailbox, and its
        # loop takes it at its next turn
        mailbox = orders.FileOrders(tmp_path)
        pin = PinOrder(str(a), "alice@box", seconds=2 * H)
        mailbox.leave(orders.Order.pin(pin, at=f.clock.now()))
        take_orders(mailbox, f.controller, logging.getLogger("scenario"))
        assert mailbox.waiting() == []
        assert [e["record"] for e in lines(f, "pin")]
        run(f, START + 1 * H)
        assert a in workers(f, "held")  # quiet for 50 minutes, held by the pin
        assert b not in alive(f, "held")  # its twin, quiet and not pinned, was ended
        assert ended_by(f)[b] in ("idle_stop", "idle_destroy", "worker_report:signal")
        refused = [e for e in ledger(f) if e["instance"] == a and e["kind"] == "decision"]
        assert not [
            e for e in refused if (e.get("data") or {}).get("action") in ("stop", "destroy")
        ]
        run(f, START + 3 * H)  # the pin ended at +2h: now the money chain may act
        assert a not in alive(f, "held")


def test_ray_work_pins_a_machine_whose_agent_sample_is_quiet() -> None:
    """A long training step shows no CPU on the container but Ray holds a task there."""
    spec = cluster("busy", min_workers=0, max_workers=1, factor=1)
    with fleet(spec, working=lambda now: False) as f:
        signals = Signals(
            f.clock,
            demand_at=lambda now: {("busy", "gpu"): 1 if now < START + 5 * M else 0},
            work_at=lambda now, records: {
                r.id: now < START + 2 * H for r in records.instances.values()
            },
        )
        f.controller.signals = signals
        run(f, START + 2 * H)
        (worker,) = workers(f, "busy")
        assert not lines(f, "idle_stop", "decision")
        run(f, START + 4 * H)  # Ray's work ended at +2h
        assert worker not in alive(f, "busy")


def test_destroys_failing_five_times_then_succeeding_end_a_removed_clusters_machine() -> None:
    spec = cluster("gone", min_workers=1, factor=1)
    with fleet(spec, faults=lambda vast_id: ContainerFault(vast_unreachable=Span())) as f:
        run(f, START + 10 * M)
        (victim,) = workers(f, "gone")
        # five destroys fail (each after the client's own 8 tries), then vast takes one
        f.sim.faults.server_error(DELETE, 5 * 8, status=502)
        f.controller.set_specs({})  # the whole directory no longer declares it
        f.controller.allow_mass_destroy = True  # its one worker is all of it: a person's yes
        removed_at = f.clock.now()
        run(f, removed_at + 15 * M)
        assert victim not in f.sim.instances
        failed = [
            e
            for e in lines(f, "finish_destroy") + lines(f, "removed_from_spec")
            if (e.get("data") or {}).get("outcome") == "error"
        ]
        assert len(failed) >= 5
        gone = f.sim.instance(victim)
        assert gone is not None
        # sent again with backoff (5 s doubling, after each call's own ~50 s of retries): done
        # within minutes, not never
        record = next(r for r in f.controller.records().instances.values() if r.vast_id == victim)
        assert record.phase is Phase.DESTROYED and record.ended_at is not None
        assert record.ended_at - removed_at < 10 * M
        charged = dollars(f, "gone")
        run(f, f.clock.now() + 1 * H)
        assert dollars(f, "gone") == charged


def test_a_stop_that_fails_is_sent_again_and_billed_in_full_until_confirmed() -> None:
    spec = cluster("stubborn", min_workers=0, max_workers=1, factor=1)
    seen: list[float] = []
    with fleet(spec, working=lambda now: False) as f:
        f.controller.signals = Signals(
            f.clock, demand_at=lambda now: {("stubborn", "gpu"): 1 if now < START + 5 * M else 0}
        )
        run(f, START + 5 * M)
        (worker,) = workers(f, "stubborn")
        f.sim.faults.server_error(STOP, 3, status=500)

        def watch_price() -> None:
            for r in f.controller.records().instances.values():
                if r.vast_id == worker and r.intent is Intent.STOPPED and r.phase is Phase.STOPPING:
                    seen.append(r.billing_dph - r.dph_total)

        run(f, START + 1 * H, each=watch_price)
        calls = [
            e
            for e in ledger(f)
            if e["instance"] == worker
            and e["kind"] == "call"
            and (e.get("data") or {}).get("action") == "stop"
        ]
        assert len(calls) >= 4  # three refused, then the one vast took
        assert seen and all(d == 0 for d in seen)  # full price while vast had not stopped it
        assert worker not in alive(f, "stubborn")


def test_a_lost_worker_leaves_rotation_and_is_replaced_without_a_destroy() -> None:
    spec = cluster("flaky", min_workers=1, factor=1)
    with fleet(spec) as f:
        signals = Signals(f.clock)
        f.controller.signals = signals
        run(f, START + 10 * M)
        (victim,) = workers(f, "flaky")
        cut = f.clock.now()
        # the host's network drops: vast no longer hears from it, nor does the head
        f.faults[victim] = ContainerFault.network_cut(cut)
        f.sim.faults.unknown(victim, at=cut)
        run(f, cut + 4.5 * M)
        record = next(r for r in f.controller.records().instances.values() if r.vast_id == victim)
        assert record.lost  # out of rotation: not capacity, never drained (DESIGN.md 11)
        assert len(workers(f, "flaky")) == 2  # a replacement came up while it was lost
        assert ended_by(f).get(victim) not in ("lost",)
        assert not [e for e in lines(f, "lost") if (e.get("data") or {}).get("action") == "destroy"]
