"""The state commands that act on the store itself: `state force-unlock` and `state migrate`.

A force-unlock is a person overruling the lock, so it is ledgered with who did it and whose lock
it removed (on PostgreSQL it also ends the holder's database session, and the fencing token
grows: the old holder's next write or call to vast is refused). A migration moves a state whole,
its lineage and serial kept (the instances' labels carry the lineage), with its ledger, into an
empty store: `terraform state push` into a new backend. Both stores are locked for it, so no
writer acts on either while it moves; the source is left as it was, for the user to retire.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from reconciler.deps import Deps, closed
from reconciler.errors import InputError
from reconciler.state.backend import StateURL
from reconciler.state.filestore import WHOLE_STATE
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.state.lock import Identity, LockHolder
from reconciler.state.snapshot import StateSnapshot
from reconciler.state.store import StateStore

FORCE_UNLOCKED_CLASS = "lock_force_unlocked"
MIGRATED_CLASS = "state_migrated"


def force_unlock(deps: Deps, lock_id: str, *, by: Identity | None = None) -> LockHolder:
    """Remove the lock whose id is `lock_id`, and say in the ledger who did it."""
    me = (by or Identity.current()).who
    store = deps.store()
    try:
        holder = store.force_unlock(lock_id)
        info = holder.info
        message = (
            f"state lock {lock_id} of `{info.operation}` (pid {info.pid} on {info.host}) removed"
            f" by {me} (force-unlock)"
        )
        data = {"removed": info.to_json(), "by": me, "liveness": holder.liveness.value}
        event = LedgerEvent(WHOLE_STATE, LedgerKind.NOTE, FORCE_UNLOCKED_CLASS, message, data=data)
        with deps.ledger(store) as ledger:
            ledger.append(event)
    finally:
        closed(store, unlock=False)
    return holder


@dataclass(frozen=True)
class Migrated:
    snapshot: StateSnapshot
    entries: int


def migrate(deps: Deps, source: StateURL, target: StateURL) -> Migrated:
    """Move the state at `source` (with its ledger) into the empty store at `target`."""
    if (source.where, source.workspace) == (target.where, target.workspace):
        raise InputError(f"state migrate: {source.where} is both the source and the target")
    src, dst = deps.store_at(source), deps.store_at(target)
    with _locked(deps, src), _locked(deps, dst):
        return _move(deps, src, dst, source, target)


@contextmanager
def _locked(deps: Deps, store: StateStore) -> Iterator[StateStore]:
    try:
        store.lock("migrate", timeout_seconds=deps.lock_timeout)
    except BaseException:
        closed(store, unlock=False)
        raise
    try:
        yield store
    finally:
        closed(store)


def _move(
    deps: Deps, src: StateStore, dst: StateStore, source: StateURL, target: StateURL
) -> Migrated:
    snapshot = src.read()
    if snapshot is None:
        raise InputError(f"{source.where} holds no state: nothing to migrate")
    there = dst.read()
    if there is not None or next(iter(deps.entries(dst)), None) is not None:
        held = f" (lineage {there.lineage}, serial {there.serial})" if there else "'s ledger"
        raise InputError(
            f"{target.where} already holds a state{held}: a state is moved only into an empty"
            " store. Nothing was changed."
        )
    entries = list(deps.entries(src))
    pushed = dst.push(snapshot)
    message = (
        f"state moved here from {source.where} (lineage {snapshot.lineage}, serial"
        f" {snapshot.serial}, {len(entries)} ledger line(s))"
    )
    data = {"from": source.where, "lineage": snapshot.lineage, "serial": snapshot.serial}
    with deps.ledger(dst) as ledger:
        count = ledger.import_entries(entries)
        ledger.append(LedgerEvent(WHOLE_STATE, LedgerKind.NOTE, MIGRATED_CLASS, message, data=data))
    return Migrated(pushed, count)
