"""`ray-vast down` while `watch` runs (issue 23): the command's order reaches the controller
through the state's mailbox; the controller holds the cluster down and ends everything of it.

Before, `down` from another terminal or machine was refused while `watch` held the state (it
named the holder), and the only way was to stop the controller first. Handing it over is not
enough: a controller reconciling an unchanged spec would rent the cluster straight back at its
next tick. So `down` marks the cluster held down (its cluster record, in the state): the watch,
or a standby or restarted one, rents nothing for it until its spec changes or it is applied
again, and ends what is left of it (a pin holds nothing against `down`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from fleetsim.harness import START, Fleet, fleet
from reconciler.model.orders import PinOrder
from reconciler.state import orders
from reconciler.watch.controller import Controller
from reconciler.watch.orders import take_orders
from tests.scenarios.world import M, alive, cluster, ended_by, rented, run, workers
from vastsim.faults import LIST_ROUTE

SPEC = cluster("held", min_workers=2, max_workers=2, factor=1)


def _order(f: Fleet, state_dir: Path, order: orders.Order) -> orders.Answer:
    """An order left by a command on another machine, taken at the controller's next turn."""
    mailbox = orders.FileOrders(state_dir)
    mailbox.leave(order)
    take_orders(mailbox, f.controller, logging.getLogger("scenario"))
    answer = mailbox.answer_of(order.id)
    assert answer is not None
    return answer


def _down(f: Fleet, state_dir: Path) -> orders.Answer:
    order = orders.Order.new(orders.DOWN, {"cluster": "held"}, at=f.clock.now(), by="bob@ci")
    return _order(f, state_dir, order)


def _restarted(f: Fleet) -> Controller:
    """Another `watch` on the same state and the same spec (a restart, or the standby taking
    over): what it knows of the hold is what the state says."""
    old = f.controller
    return Controller(
        specs={SPEC.name: SPEC}, journal=old.journal, provider=old.provider,
        launcher=old.launcher, clock=old.clock, signals=old.signals,
    )  # fmt: skip


def test_down_handed_to_the_watch_ends_everything_and_nothing_is_rented_back(
    tmp_path: Path,
) -> None:
    with fleet(SPEC) as f:
        run(f, START + 10 * M)
        first = workers(f, "held")
        assert len(first) == 2
        pinned = sorted(first)[0]
        pin = PinOrder(str(pinned), "alice@box", reason="debugging")
        assert _order(f, tmp_path, orders.Order.pin(pin, at=f.clock.now())).code == 0

        answer = _down(f, tmp_path)
        assert answer.code == 0, answer.message
        assert "holds held down" in answer.message
        made = set(rented(f, "held"))
        run(f, f.clock.now() + 30 * M)
        assert alive(f, "held") == set(), "the down ended everything, the pinned one too"
        assert {ended_by(f)[v] for v in first} == {"down"}
        assert set(rented(f, "held")) == made, "nothing rented back for an unchanged spec"
        records = f.controller.records()
        assert not records.live_instances("held"), "the destroyed machines' records closed"
        assert records.clusters["held"].down_at is not None

        # a restart or a standby on the same state and spec keeps holding it down
        f.controller = _restarted(f)
        run(f, f.clock.now() + 30 * M)
        assert set(rented(f, "held")) == made

        # a change to its spec lifts the hold: the cluster is rented again
        changed = cluster("held", min_workers=2, max_workers=2, factor=1, cap=6.0)
        f.controller.set_specs({changed.name: changed}, revision="rev-3")
        run(f, f.clock.now() + 10 * M)
        assert len(workers(f, "held")) == 2
        assert f.controller.records().clusters["held"].down_at is None


def test_a_down_the_listing_cannot_back_destroys_nothing_and_holds_nothing(
    tmp_path: Path,
) -> None:
    with fleet(SPEC) as f:
        run(f, START + 10 * M)
        before = alive(f, "held")
        f.sim.faults.server_error(LIST_ROUTE, 1000, status=502)
        answer = _down(f, tmp_path)
        f.sim.faults.heal(LIST_ROUTE)
        assert answer.code == 1 and "nothing destroyed" in answer.message, answer.message
        assert f.controller.records().clusters["held"].down_at is None
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "held") == before
