"""The orders left for this watch (`state/orders.py`), taken at each loop turn, oldest first.

A pin or unpin is decided under the records lock and ledgered, as `ray-vast pin` would have done.
An apply (a saved or reviewed plan a command or a pipeline handed over) is asked the questions
`apply PLAN` asks (`operations.check_specs`, `check_saved`: the specs it was made from, the
state's lineage, the generations of the clusters it covers, the live instances it acts on, a mass
destroy) under this watch's lease, then carried out by its own applier; the clusters it applied
are reconciled against the specs it carried from then on (until this watch's own source changes).
Every order is answered (code and message), a refusal included; one that cannot be read too.
"""

from __future__ import annotations

import logging
from pathlib import Path

from reconciler import planfile
from reconciler.applying.pinlog import log_pin
from reconciler.errors import RayVastError
from reconciler.model.applied import remembered
from reconciler.operations import EXIT_ERROR, EXIT_OK, check_saved, check_specs, outcome_of
from reconciler.planning import pins
from reconciler.spec.loader import load_texts
from reconciler.state.orders import APPLY, PIN, Answer, FileOrders, Order, OrderQueue
from reconciler.state.sql.orders import SqlOrders
from reconciler.state.sql.store import SqlStore
from reconciler.watch.controller import Controller


def mailbox(controller: Controller, state_dir: Path) -> OrderQueue:
    """This watch's mailbox: on its state's own connection when the state is a database's."""
    store = controller.journal.store
    return SqlOrders(store.link) if isinstance(store, SqlStore) else FileOrders(state_dir)


def take_orders(queue: OrderQueue, controller: Controller, logger: logging.Logger) -> None:
    for order in queue.waiting():
        if isinstance(order, str):
            logger.warning("order %s cannot be read; answered as refused", order)
            queue.answer(order, Answer(EXIT_ERROR, f"order {order} cannot be read"))
            continue
        answer = _pin(order, controller) if order.kind == PIN else None
        if order.kind == APPLY:
            answer = _apply(order, controller)
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
    controller.set_specs({**controller.specs, **{s.name: s for s in specs}})
    code, text = outcome_of(result)
    return Answer(code, f"Applied by this watch: {text.strip()}")
