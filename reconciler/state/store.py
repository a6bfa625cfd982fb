"""The state store interface, and the write rules every store applies the same way.

Callers see one small protocol (style.md practice 4, Terraform's `statemgr.Full`): `read`, `write`,
`lock`, `unlock`, `force_unlock`, `lock_holder`. `FileStore` is the real one, `MemoryStore` the fake
for tests of the layers above; `tests/state/test_store_contract.py` runs one suite against both.

A write says which snapshot it is based on, and the store refuses it unless that is the current
state: same lineage (a copied or foreign state must not overwrite this one) and same serial (the
state must not have moved on since it was read). Writes need the lock. A write whose records equal
the current ones changes nothing, not even the serial, so "serial changed" always means "content
changed" and a saved plan stays valid across no-op saves.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from reconciler.clock import Clock
from reconciler.state.errors import LineageMismatchError, SerialMismatchError, StateConflictError
from reconciler.state.jsonvalue import plain_json
from reconciler.state.lock import Identity, LockHolder
from reconciler.state.lockinfo import LockInfo
from reconciler.state.redact import redact
from reconciler.state.snapshot import Records, StateSnapshot


class StateStore(Protocol):
    """Where the reconciler's memory lives; one writer at a time."""

    def read(self) -> StateSnapshot | None:
        """The current state, or None if there has never been one. Never a guessed empty state."""
        ...

    def write(self, records: Records, *, based_on: StateSnapshot | None) -> StateSnapshot:
        """Save `records` as the next version of `based_on` (None: the very first state)."""
        ...

    def lock(self, operation: str, *, timeout_seconds: float = 0.0) -> LockInfo:
        """Take the lock for `operation`, waiting up to `timeout_seconds`, or `StateLockedError`."""
        ...

    def unlock(self) -> None:
        """Release the lock this store holds; `LockLostError` if it was force-unlocked meanwhile."""
        ...

    def force_unlock(self, lock_id: str) -> LockHolder:
        """Remove the lock whose ID is `lock_id`, whoever holds it; return what was removed."""
        ...

    def lock_holder(self) -> LockHolder | None:
        """Who holds the lock now, if anyone."""
        ...

    @property
    def held(self) -> LockInfo | None:
        """The lock this store holds, if it holds one."""
        ...

    def check_lease(self) -> None:
        """`LockLostError` unless the lock is still this store's (the executor asks before every
        call to vast: a lease may lapse, a lock may be force-unlocked, while a command runs)."""
        ...

    def push(self, snapshot: StateSnapshot) -> StateSnapshot:
        """Put `snapshot` (its lineage and serial kept) into this empty store, under the lock:
        `ray-vast state migrate`. A store that holds a state refuses."""
        ...


@contextmanager
def locked(
    store: StateStore, operation: str, *, timeout_seconds: float = 0.0
) -> Iterator[LockInfo]:
    """Hold the lock for the duration of a `with` block."""
    info = store.lock(operation, timeout_seconds=timeout_seconds)
    try:
        yield info
    finally:
        store.unlock()


def new_lineage() -> str:
    return str(uuid.uuid4())


def new_lock_info(
    *, operation: str, identity: Identity, clock: Clock, tool_version: str, path: str
) -> LockInfo:
    return LockInfo(
        id=str(uuid.uuid4()),
        operation=operation,
        who=identity.who,
        pid=identity.pid,
        created=clock.now(),
        version=tool_version,
        path=path,
    )


def prepare_records(records: Records, secrets: Iterable[str]) -> Records:
    """A plain, checked, secret-free copy of what the caller asked to save."""
    result: Records = plain_json(redact(records, secrets), "records")
    return result


def refuse_push(current: StateSnapshot | None, where: str) -> None:
    """A push goes only into an empty store (`state migrate` never overwrites a state)."""
    if current is not None:
        raise LineageMismatchError(
            f"{where} already holds lineage {current.lineage} (serial {current.serial}); a state"
            " is moved only into an empty store. Nothing was written."
        )


def check_basis(current: StateSnapshot | None, based_on: StateSnapshot | None, where: str) -> None:
    """Refuse a write whose basis is not the current state (Terraform's `state push` checks)."""
    if current is None:
        if based_on is not None:
            raise StateConflictError(
                f"{where} has no state, but the write is based on lineage {based_on.lineage}"
                f" serial {based_on.serial}: the state was removed since it was read."
            )
        return
    if based_on is None:
        raise LineageMismatchError(
            f"{where} already holds lineage {current.lineage} (serial {current.serial}); a write"
            " that starts a new state would replace it. Read the current state first."
        )
    if based_on.lineage != current.lineage:
        raise LineageMismatchError(
            f"{where} holds lineage {current.lineage}, but the write is based on lineage"
            f" {based_on.lineage}: a different state (a copy, or another environment's) must not"
            " overwrite it."
        )
    if based_on.serial != current.serial:
        raise SerialMismatchError(
            f"{where} is at serial {current.serial}, but the write is based on serial"
            f" {based_on.serial}: the state changed since it was read."
        )


def next_snapshot(
    current: StateSnapshot | None,
    records: Records,
    *,
    tool_version: str,
    make_lineage: Callable[[], str] = new_lineage,
) -> StateSnapshot | None:
    """The snapshot to write after `current`, or None when the records did not change."""
    if current is None:
        return StateSnapshot(
            lineage=make_lineage(), serial=1, ray_vast_version=tool_version, records=records
        )
    if current.records == records:  # plain JSON both: equal dicts, equal documents
        return None
    return StateSnapshot(
        lineage=current.lineage,
        serial=current.serial + 1,
        ray_vast_version=tool_version,
        records=records,
    )
