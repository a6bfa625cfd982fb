"""`down` after the person confirmed: what became of its destroys, vast's confirmation of them,
and the records closed once the cluster is gone.

The plan of a down is `planning/teardown.py` (pure), and the executor carries it out like any
other. What is left is here: telling the destroys vast refused, those an interruption left unsent
and those sent apart; waiting (with backoff) until vast's listing no longer shows the sent ones;
and, when nothing of the cluster is left, ending its live records as "down". What must not live
here: anything said to the person (`downing.down` says it) and any destroy of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from reconciler.applying.executor import ApplyResult
from reconciler.applying.journal import Journal
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.model.observed import Instance
from reconciler.model.plan import Plan
from reconciler.planning.teardown import down_plan
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.vast.errors import VastError


@dataclass(frozen=True)
class DownOutcome:
    """What became of a down's destroys, by vast id."""

    interrupted: bool  # the executor stopped before its last action
    failed: set[int]  # vast refused the destroy
    undone: set[int]  # not carried out (interrupted before it, or skipped)
    remaining: set[int]  # sent, and vast still lists it

    @property
    def complete(self) -> bool:
        """Every destroy sent and confirmed: the cluster's records may be closed."""
        return not self.failed and not self.remaining and not self.undone


def planned_down(journal: Journal, cluster: str, listing: Sequence[Instance], now: float) -> Plan:
    """`down`'s plan for one cluster on the journal's records as they are now: the one place
    both the `down` command and a watch carrying out a down order build it."""
    return down_plan(
        cluster,
        listing,
        journal.records(),
        lineage=journal.lineage,
        serial=journal.serial,
        now=now,
    )


def down_outcome(
    plan: Plan, result: ApplyResult, wait: Callable[[set[int]], set[int]]
) -> DownOutcome:
    """Sort the destroys out; `wait` is given the ones carried out and returns those vast still
    lists."""
    failed = {a.vast_id for a, _ in result.failed if a.vast_id is not None}
    undone = {a.vast_id for a in plan.actions if a.vast_id is not None} - failed
    undone -= {a.vast_id for a in result.done if a.vast_id is not None}
    pending = {a.vast_id for a in result.done if a.vast_id is not None}
    return DownOutcome(result.interrupted, failed, undone, wait(pending))


def wait_gone(
    provider: Provider,
    ids: set[int],
    *,
    clock: Clock,
    stop_requested: Callable[[], bool],
    timeout: float = 300.0,
) -> set[int]:
    """Wait until vast's listing no longer shows `ids`: vast confirms each destroy."""
    deadline = clock.now() + timeout
    pause = 0.25
    while ids and not stop_requested():  # interrupted: the destroys are made, and saved
        try:
            listed = {i.id for i in provider.list_instances()}
        except VastError:
            listed = ids
        ids = ids & listed
        if not ids or clock.now() >= deadline:
            break
        clock.sleep(pause)
        pause = min(pause * 2, 5.0)
    return ids


def close_records(journal: Journal, cluster: str, now: float) -> None:
    """The cluster is gone at vast: its live records end as "down", and the ledger says so."""
    records = journal.records()
    closed = {
        rid: r.closed(now, r.ended_reason or "down") if r.cluster == cluster and r.live else r
        for rid, r in records.instances.items()
    }
    journal.save(replace(records, instances=closed))
    journal.ledger.append(
        LedgerEvent(cluster, LedgerKind.OUTCOME, "down", f"cluster {cluster} is down")
    )
