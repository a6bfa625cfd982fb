"""While `watch` runs it is the state's one writer: what the commands that would write do then.

`pin`, `unpin`, `apply` (of a spec directory, a saved plan, or the reviewed plan of a merge) and
`down` take the
state's lock when no controller holds it, as before. When a live `watch` holds it (on this
machine or any other sharing the state's database), they leave an order in the state's mailbox
(`state/orders.py`) instead: a pin is handed over and the command returns; an apply waits for
the controller's answer (it re-checks the plan for staleness under its own lease and carries it
out with its own applier, `watch/orders.py`), says it, and exits with its code; a down is shown
and confirmed here, carried out there, and its destroys' confirmation awaited here. An order
whose answer does not come in time is withdrawn, unless the controller took it meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from reconciler import downing, operations, planfile
from reconciler.applying.pinlog import log_pin
from reconciler.deps import Deps, closed
from reconciler.model.applied import HELD_DOWN
from reconciler.model.orders import PinOrder
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.operations import EXIT_ERROR, EXIT_OK, OperationError
from reconciler.planning import pins, teardown
from reconciler.state.errors import Liveness, StateLockedError
from reconciler.state.lock import Identity
from reconciler.state.orders import APPLY, DOWN, Answer, FileOrders, Order, OrderQueue
from reconciler.state.sql.orders import SqlOrders
from reconciler.state.sql.store import SqlStore
from reconciler.views import ledger as ledger_view
from reconciler.views import pins as pins_view
from reconciler.views import plan as plan_view
from reconciler.views import status_text

# The lock operations of a long-running controller (`up` runs `watch` once it has applied).
CONTROLLER_OPERATIONS = frozenset({"watch"})
# How long an apply waits for the controller's answer, and how often it looks.
ANSWER_WAIT_SECONDS = 900.0
ANSWER_POLL_SECONDS = 0.5
# How long `down` waits for an `up` whose every cluster it took down to end.
CONTROLLER_END_SECONDS = 60.0


def to_controller(refused: StateLockedError) -> bool:
    """Whether a refused lock is a live controller's: the command hands itself to it."""
    return refused.info.operation in CONTROLLER_OPERATIONS and refused.liveness is not Liveness.DEAD


@contextlib.contextmanager
def queue(deps: Deps) -> Iterator[OrderQueue]:
    """The state's mailbox: its database's, or its directory's files."""
    store = deps.store()
    try:
        yield SqlOrders(store.link) if isinstance(store, SqlStore) else FileOrders(deps.state_dir)
    finally:
        closed(store, unlock=False)


def pin(deps: Deps, order: PinOrder) -> int:
    """Hold a machine for a person (or end that hold: `order.unpin`): no net, money-chain step or
    scale-down ends or stops it while the pin lasts. Only the state changes; vast is not called.
    While `watch` runs the order is left in its mailbox, and it decides it under its own lock at
    its next loop turn (within about a second)."""
    try:
        with deps.journal("unpin" if order.unpin else "pin") as journal:
            outcome = _decided(journal.records(), order, journal.lineage, deps.clock.now())
            if outcome.changed:
                journal.save(outcome.records)
                log_pin(journal, outcome)
    except StateLockedError as exc:
        if not to_controller(exc):
            raise
        with queue(deps) as mailbox:
            mailbox.leave(Order.pin(order, at=deps.clock.now()))
        deps.out.write(
            f"`ray-vast watch` (pid {exc.info.pid} on {exc.info.host}) holds the state: the "
            f"{'unpin' if order.unpin else 'pin'} of {order.target} is handed to it, and it takes "
            "it within a second (`ray-vast ledger --class pin` shows it, `status` the pin).\n"
        )
        return EXIT_OK
    deps.out.write(pins_view.said(outcome, order) + "\n")
    return EXIT_OK


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `2h`, `1d`: seconds, more than zero (a pin's `--for`)."""
    match = ledger_view.DURATION.match(text.strip())
    seconds = float(match[1]) * ledger_view.UNITS[match[2]] if match else 0.0
    if seconds <= 0:
        raise OperationError(
            f"--for {text!r}: use a number and a unit, e.g. 90s, 30m, 2h or 1d (more than zero)"
        )
    return seconds


def _decided(records: Records, order: PinOrder, lineage: str, now: float) -> pins.PinOutcome:
    try:
        return pins.decide(records, order, lineage=lineage, now=now)
    except pins.PinRefused as exc:
        raise OperationError(str(exc)) from exc


def apply(
    deps: Deps,
    refused: StateLockedError,
    saved: planfile.SavedPlan,
    specs: Sequence[ClusterSpec],
    *,
    allow_mass_destroy: bool,
) -> int:
    """Hand a saved plan to the controller that holds the state, and wait for its answer."""
    body = {
        "plan": planfile.dumps(saved).decode(),
        "specs": [s.document for s in specs],
        "allow_mass_destroy": allow_mass_destroy,
    }
    order = Order.new(APPLY, body, at=deps.clock.now(), by=Identity.current().who)
    info = refused.info
    deps.out.write(
        f"`ray-vast {info.operation}` (pid {info.pid} on {info.host}) holds the state: the plan"
        f" is handed to it (order {order.id}); waiting for its answer.\n"
    )
    answer = _answered(deps, order)
    deps.out.write(answer.message.rstrip("\n") + "\n")
    return answer.code if answer.code in (EXIT_OK, EXIT_ERROR, 3) else EXIT_ERROR


def apply_specs(
    deps: Deps,
    refused: StateLockedError,
    specs: Sequence[ClusterSpec],
    *,
    spec_path: Path,
    auto_approve: bool,
    allow_mass_destroy: bool,
) -> int:
    """`apply SPEC_DIR` while a live controller holds the state: planned here on the state as
    last saved (no lock), shown and approved, then handed over as a saved plan (the controller
    refuses it as stale, exit 3, when a cluster it covers changed meanwhile)."""
    saved = operations.plan_to_save(deps, specs, spec_path=spec_path)
    deps.out.write(plan_view.human(saved.plan))
    if saved.plan.errored:
        return EXIT_ERROR
    records, _, _ = deps.read_records()
    if not saved.plan.has_changes and _followed(records, specs):
        return EXIT_OK
    if not auto_approve:
        operations.confirm(deps)
    return apply(deps, refused, saved, specs, allow_mass_destroy=allow_mass_destroy)


def _followed(records: Records, specs: Sequence[ClusterSpec]) -> bool:
    """Whether the controller already reconciles exactly these specs, none held down: only then
    is a plan with no changes nothing to hand over (else applying it makes the controller take
    these specs, and lifts a `down`'s hold)."""
    return all(
        (record := records.clusters.get(s.name)) is not None
        and record.spec_digest == s.digest
        and record.down_at is None
        for s in specs
    )


def down(
    deps: Deps,
    refused: StateLockedError,
    cluster: str,
    specs: Sequence[ClusterSpec],
    *,
    auto_approve: bool,
    head: downing.HeadStop | None = None,
) -> int:
    """`down` while a live controller holds the state: the person sees what will end and says
    yes, as ever; the controller marks the cluster held down and sends the destroys; this
    command waits for vast's confirmation (a read of the listing, no lock), then stops the
    cluster's Ray head when ray-vast runs it here (`up`, which stops once all its clusters are
    down: it is waited for, so the simulator can stop after it)."""
    provider = deps.provider([s for s in specs if s.name == cluster])
    _, lineage, _ = deps.read_records()
    targets = [i for i in downing.listed(provider) if teardown.labelled_for(i, cluster)]
    deps.out.write(status_text.down_listing(cluster, targets, lineage or ""))
    info = refused.info
    deps.out.write(
        f"`ray-vast {info.operation}` (pid {info.pid} on {info.host}) holds the state: it carries"
        f" the down out, and holds {cluster} down from then on ({HELD_DOWN}).\n"
    )
    if head is not None:
        deps.out.write(f"ray-vast down {cluster} will stop {head.description}.\n")
    downing.approve_down(deps, auto_approve=auto_approve)
    order = Order.new(DOWN, {"cluster": cluster}, at=deps.clock.now(), by=Identity.current().who)
    answer = _answered(deps, order)
    deps.out.write(answer.message.rstrip("\n") + "\n")
    if answer.code != EXIT_OK:
        return EXIT_ERROR
    remaining = downing.confirm_gone(deps, provider, {i.id for i in targets})
    if remaining:
        deps.err.write(f"Error: still present at vast: {sorted(remaining)}\n")
        return EXIT_ERROR
    deps.out.write(f"\nDown complete: {len(targets)} instance(s) of {cluster} destroyed.\n")
    if head is not None:
        _controller_ended(deps, refused)
        if head.stop():
            deps.out.write(f"Ray head of {cluster} stopped.\n")
    return EXIT_OK


def _controller_ended(deps: Deps, refused: StateLockedError) -> None:
    """Wait (a while) for the controller to end, when `down` holds every cluster it has down:
    `up` stops then, and the Ray head and the simulator it used can stop after it."""
    records, _, _ = deps.read_records()
    if any(c.down_at is None for c in records.clusters.values()):
        return  # it still runs other clusters
    store = deps.store()
    try:
        deadline = deps.clock.now() + CONTROLLER_END_SECONDS
        while deps.clock.now() < deadline:
            holder = store.lock_holder()
            if holder is None or holder.info.id != refused.info.id:
                return
            deps.clock.sleep(ANSWER_POLL_SECONDS)
    finally:
        closed(store, unlock=False)


def _answered(deps: Deps, order: Order) -> Answer:
    """Leave `order` and wait for the controller's answer; withdrawn when none comes in time."""
    deps.out.flush()
    with queue(deps) as mailbox:
        ring = mailbox.bell(answer_of=order.id)  # listening before the order is left
        try:
            mailbox.leave(order)
            deadline = deps.clock.now() + ANSWER_WAIT_SECONDS
            while (answer := mailbox.answer_of(order.id)) is None:
                if deps.clock.now() >= deadline and mailbox.withdraw(order.id):
                    raise OperationError(
                        f"the controller did not answer order {order.id} in"
                        f" {ANSWER_WAIT_SECONDS:.0f} s; it was withdrawn, nothing was done"
                    )
                if ring is None:
                    deps.clock.sleep(ANSWER_POLL_SECONDS)
                else:
                    ring.wait(ANSWER_POLL_SECONDS)  # at once when the answer is written
        finally:
            if ring is not None:
                ring.close()
    return answer
