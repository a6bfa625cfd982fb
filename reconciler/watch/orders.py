"""The orders left for this watch (`state/orders.py`), taken at each loop turn, oldest first.

A pin or unpin is decided under the records lock and ledgered, as `ray-vast pin` would have done.
A down marks the cluster held down (`model/applied.py`: this watch, or a standby after it, rents
nothing for it until its spec changes or it is applied again) and carries out the destroy of
everything vast lists with its label; the command that asked waits for vast's confirmation.
An apply (a saved or reviewed plan a command or a pipeline handed over) is asked the questions
`apply PLAN` asks (`operations.check_specs`, `check_saved`: the specs it was made from, the
state's lineage, the generations of the clusters it covers, the live instances it acts on, a mass
destroy) under this watch's lease, then carried out by its own applier; the clusters it applied
are reconciled against the specs it carried from then on (until this watch's own source changes).
Every order is answered (code and message), a refusal included; one that cannot be read too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from reconciler import planfile
from reconciler.applying.pinlog import log_pin
from reconciler.applying.teardown import planned_down
from reconciler.clock import Clock
from reconciler.errors import RayVastError
from reconciler.model.applied import HELD_DOWN, downed, remembered
from reconciler.operations import EXIT_ERROR, EXIT_OK, check_saved, check_specs, outcome_of
from reconciler.planning import pins
from reconciler.spec.loader import load_texts
from reconciler.state.orders import APPLY, DOWN, PIN, Answer, FileOrders, Order, OrderQueue
from reconciler.state.sql.orders import SqlOrders
from reconciler.state.sql.store import SqlStore
from reconciler.vast.errors import VastError
from reconciler.watch.controller import Controller

# How often a wait on the doorbell looks at the stop event (a signal ends it within this).
STOP_CHECK_SECONDS = 0.2


def mailbox(controller: Controller, state_dir: Path) -> OrderQueue:
    """This watch's mailbox: on its state's own connection when the state is a database's."""
    store = controller.journal.store
    return SqlOrders(store.link) if isinstance(store, SqlStore) else FileOrders(state_dir)


class Doorbell:
    """The loop's wait between turns: cut short when an order is left, where the state's
    database rings (PostgreSQL's NOTIFY); a plain wait where the next turn's look finds it."""

    def __init__(self, queue: OrderQueue) -> None:
        self._ring = queue.bell()

    def wait(self, clock: Clock, stop: threading.Event, seconds: float) -> None:
        if self._ring is None:
            clock.wait(stop, seconds)
            return
        deadline = time.monotonic() + max(seconds, 0.0)
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if self._ring.wait(min(left, STOP_CHECK_SECONDS)):
                return

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()


def take_orders(queue: OrderQueue, controller: Controller, logger: logging.Logger) -> None:
    for order in queue.waiting():
        if isinstance(order, str):
            logger.warning("order %s cannot be read; answered as refused", order)
            queue.answer(order, Answer(EXIT_ERROR, f"order {order} cannot be read"))
            continue
        taker = TAKERS.get(order.kind)
        answer = taker(order, controller) if taker is not None else None
        if answer is None:
            answer = Answer(EXIT_ERROR, f"this watch does not know orders of kind {order.kind!r}")
        log = logger.info if answer.code == EXIT_OK else logger.warning
        log("order %s (%s, by %s): %s", order.id, order.kind, order.by, answer.message.strip())
        queue.answer(order.id, answer)


def _pin(order: Order, controller: Controller) -> Answer:
    pin = order.pin_order()
    verb = "unpin" if pin.unpin else "pin"
    with controller.lock:
        try:
            outcome = pins.decide(
                controller.records(), pin, lineage=controller.journal.lineage,
                now=controller.clock.now(),
            )  # fmt: skip
        except pins.PinRefused as exc:
            return Answer(EXIT_ERROR, f"{verb} of {pin.target} refused: {exc}")
        if outcome.changed:
            controller.journal.save(outcome.records)
            log_pin(controller.journal, outcome)
    return Answer(EXIT_OK, f"{verb}: {pins.name(outcome.record)} ({outcome.message})")


def _apply(order: Order, controller: Controller) -> Answer:
    try:
        saved = planfile.loads(str(order.body["plan"]).encode(), f"order {order.id}")
        loaded = load_texts([(f"order {order.id}", str(d)) for d in order.body["specs"]])
        if not loaded.ok:
            return Answer(EXIT_ERROR, f"order {order.id}: its specs do not load")
        specs = list(loaded.clusters)
        check_specs(saved, specs)
        listing = controller.provider.list_instances()
        allow = bool(order.body.get("allow_mass_destroy", False))
        with controller.lock:
            check_saved(saved, controller.journal, listing, allow)
    except RayVastError as exc:  # stale (3), or refused (1): said to the one who asked
        return Answer(exc.exit_code, f"Error: {exc}")
    result = controller.applier.apply(saved.plan)
    controller.journal.update(lambda records: remembered(records, specs))
    controller.set_specs({**controller.declared, **{s.name: s for s in specs}})
    code, text = outcome_of(result)
    return Answer(code, f"Applied by this watch: {text.strip()}")


def _down(order: Order, controller: Controller) -> Answer:
    cluster = str(order.body["cluster"])
    try:
        listing = controller.provider.list_instances()
    except VastError as exc:
        return Answer(EXIT_ERROR, f"Error: cannot list vast's instances ({exc}); nothing destroyed")
    now = controller.clock.now()
    with controller.lock:
        journal = controller.journal
        journal.update(lambda records: downed(records, cluster, now, controller.declared.values()))
        plan = planned_down(journal, cluster, listing, now)
    controller.set_specs(controller.declared)  # it leaves the reconciled specs
    code, text = outcome_of(controller.applier.apply(plan)) if plan.actions else (EXIT_OK, "")
    held = f"This watch holds {cluster} down: {HELD_DOWN}."
    return Answer(code, f"Down by this watch: {text.strip() or 'nothing to destroy.'}\n{held}")


TAKERS: dict[str, Callable[[Order, Controller], Answer]] = {
    PIN: _pin,
    APPLY: _apply,
    DOWN: _down,
}
