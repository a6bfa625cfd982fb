"""The in-memory state store: the fake the layers above test against.

It follows the file store's rules exactly (the contract suite runs against both): snapshots are
kept as the bytes `encode` makes and read back through `decode`; writes need the lock and a
current basis; force-unlock takes the lock from its holder, whose next write then fails with
`LockLostError`.
Several `MemoryStore`s sharing one `MemoryBackend` contend for its lock like several processes.
A holder here cannot die, so its lock is always reported alive.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from reconciler import __version__
from reconciler.clock import Clock
from reconciler.state.errors import (
    Liveness,
    LockLostError,
    LockNotHeldError,
    StateError,
    StateLockedError,
    UnlockRefusedError,
)
from reconciler.state.lock import Identity, LockHolder, wait_for_lock
from reconciler.state.lockinfo import LockInfo
from reconciler.state.redact import normalise_secrets
from reconciler.state.snapshot import Records, StateSnapshot, decode, encode
from reconciler.state.store import (
    check_basis,
    new_lock_info,
    next_snapshot,
    prepare_records,
    refuse_push,
)

MEMORY_PATH = "memory:state.json"
MEMORY_LOCK_PATH = Path("memory:state.lock")


@dataclass
class MemoryBackend:
    """What the stores sharing it see: the current and previous state bytes, and the lock."""

    state: bytes | None = None
    backup: bytes | None = None
    lock: LockInfo | None = None
    owner: object | None = None  # the MemoryStore holding `lock`


class MemoryStore:
    """A `StateStore` that keeps everything in a `MemoryBackend`."""

    def __init__(
        self,
        backend: MemoryBackend | None = None,
        *,
        clock: Clock,
        secrets: Iterable[str] = (),
        tool_version: str = __version__,
        identity: Identity | None = None,
    ) -> None:
        self.backend = backend if backend is not None else MemoryBackend()
        self._clock = clock
        self._secrets = normalise_secrets(secrets)
        self._tool_version = tool_version
        self._identity = identity or Identity(who="test@memory", pid=0)
        self._held: LockInfo | None = None

    def read(self) -> StateSnapshot | None:
        data = self.backend.state
        return None if data is None else decode(data, MEMORY_PATH)

    def write(self, records: Records, *, based_on: StateSnapshot | None) -> StateSnapshot:
        self._require_lock()
        prepared = prepare_records(records, self._secrets)
        current = self.read()
        check_basis(current, based_on, MEMORY_PATH)
        snapshot = next_snapshot(current, prepared, tool_version=self._tool_version)
        if snapshot is None:
            assert current is not None
            return current
        data = encode(snapshot, indent=None)
        self.backend.backup, self.backend.state = self.backend.state, data
        return decode(data, MEMORY_PATH)

    def push(self, snapshot: StateSnapshot) -> StateSnapshot:
        self._require_lock()
        refuse_push(self.read(), MEMORY_PATH)
        self.backend.state = encode(snapshot, indent=None)
        return snapshot

    @property
    def held(self) -> LockInfo | None:
        return self._held

    def check_lease(self) -> None:
        self._require_lock()

    def lock(self, operation: str, *, timeout_seconds: float = 0.0) -> LockInfo:
        if self._held is not None:
            raise StateError(f"this store already holds the state lock {self._held.id}")
        info = wait_for_lock(
            lambda: self._try_lock(operation), clock=self._clock, timeout_seconds=timeout_seconds
        )
        self._held = info
        return info

    def _try_lock(self, operation: str) -> LockInfo | StateLockedError:
        backend = self.backend
        if backend.lock is not None:
            return StateLockedError(
                backend.lock, liveness=Liveness.ALIVE, lock_path=MEMORY_LOCK_PATH
            )
        info = new_lock_info(
            operation=operation,
            identity=self._identity,
            clock=self._clock,
            tool_version=self._tool_version,
            path=MEMORY_PATH,
        )
        backend.lock, backend.owner = info, self
        return info

    def unlock(self) -> None:
        held = self._held
        if held is None:
            raise LockNotHeldError("this store does not hold the state lock")
        self._held = None
        if not self._owns(held):
            raise LockLostError(f"the state lock {held.id} held by this store was force-unlocked")
        self.backend.lock = self.backend.owner = None

    def force_unlock(self, lock_id: str) -> LockHolder:
        backend = self.backend
        if backend.lock is None:
            raise UnlockRefusedError("There is no state lock: nothing to unlock.")
        if backend.lock.id != lock_id:
            raise UnlockRefusedError(
                f"The state lock has a different ID than {lock_id!r}. Nothing was unlocked."
            )
        removed = LockHolder(backend.lock, Liveness.ALIVE)
        if backend.owner is self:
            self._held = None
        backend.lock = backend.owner = None
        return removed

    def lock_holder(self) -> LockHolder | None:
        lock = self.backend.lock
        return None if lock is None else LockHolder(lock, Liveness.ALIVE)

    def _owns(self, held: LockInfo) -> bool:
        return self.backend.owner is self and self.backend.lock == held

    def _require_lock(self) -> None:
        if self._held is None:
            raise LockNotHeldError(
                "writing the state needs the state lock; take it with lock() first"
            )
        if not self._owns(self._held):
            raise LockLostError(
                f"the state lock {self._held.id} held by this store was force-unlocked"
            )
