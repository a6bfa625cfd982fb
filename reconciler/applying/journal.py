"""Where the executor's memory goes: the state store and the ledger, kept in step.

Intent is saved before every provider call and the outcome after it (DESIGN.md section 9), so
saving must be cheap to call and impossible to forget. `Journal.save` writes the records as the
next version of the snapshot it last wrote; `Journal.ledger.append` adds a ledger event. Both
redact the secrets they were given.

The records are shared: the watch controller's ticks, the head's enrollment and heartbeat handlers
and the applier's threads all read and change them, behind the journal's one `RecordsLock`. The
rule that keeps heartbeats answered while vast is slow (DESIGN.md 10, "One applier"): a decision
and its intent are taken under the lock, the lock is released for the call to vast, and the
outcome is recorded under it again. `RecordsLock.held_here` lets the applier check the rule.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from reconciler import settings
from reconciler.model.codec import decode, encode
from reconciler.model.records import Records
from reconciler.state.ledger import LedgerSink
from reconciler.state.snapshot import StateSnapshot
from reconciler.state.store import StateStore


def records_of(snapshot: StateSnapshot | None) -> Records:
    """The typed records of a snapshot (empty for a state that holds none yet)."""
    if snapshot is None or not snapshot.records:
        return Records()
    return decode(Records, dict(snapshot.records))


class RecordsLock:
    """A re-entrant lock that knows whether the calling thread holds it (the applier refuses to
    call vast while it does)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._owner = threading.get_ident()
            self._depth += 1
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def __enter__(self) -> RecordsLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def held_here(self) -> bool:
        return self._owner == threading.get_ident()


@dataclass
class Journal:
    store: StateStore
    ledger: LedgerSink
    snapshot: StateSnapshot
    lock: RecordsLock = field(default_factory=RecordsLock)
    # The typed records of `snapshot`, decoded once per version rather than on every read.
    _decoded: tuple[int, Records] | None = None
    # Records ahead of `snapshot` by clocks only (`keep`), and since when (the caller's clock).
    _kept: Records | None = None
    _kept_since: float | None = None

    @property
    def lineage(self) -> str:
        return self.snapshot.lineage

    @property
    def serial(self) -> int:
        return self.snapshot.serial

    def records(self) -> Records:
        with self.lock:
            if self._kept is not None:
                return self._kept
            key = id(self.snapshot)
            if self._decoded is None or self._decoded[0] != key:
                self._decoded = (key, records_of(self.snapshot))
            return self._decoded[1]

    def save(self, records: Records) -> None:
        """Write `records` as the next state version (with any clocks kept unwritten); nothing
        is written when nothing changed."""
        with self.lock:
            if self._kept is None and records == self.records():
                return
            self._write(records)

    def keep(self, records: Records, now: float) -> None:
        """`records`, ahead of the current ones by a worker's clocks only (a heartbeat): current
        at once, written with the next save or once `settings.KEPT_CLOCKS_SECONDS` have passed
        on `now`'s clock since the first change kept. A save writes the whole state, and
        heartbeats come 33 a second at 1,000 workers; what a crash loses is seconds of report
        clocks that went-silent reads in minutes."""
        with self.lock:
            if self._kept_since is None:
                self._kept_since = now
            if now - self._kept_since >= settings.KEPT_CLOCKS_SECONDS:
                self._write(records)
            else:
                self._kept = records

    def flush(self) -> None:
        """Write the clocks kept unwritten, if any (a watch that stops says all it knows)."""
        with self.lock:
            if self._kept is not None:
                self._write(self._kept)

    def _write(self, records: Records) -> None:
        self.snapshot = self.store.write(encode(records), based_on=self.snapshot)
        self._decoded = (id(self.snapshot), records)
        self._kept = self._kept_since = None

    def check_lease(self) -> None:
        """`LockLostError` unless the state's lock is still ours (before every call to vast)."""
        self.store.check_lease()

    def update(self, change: Callable[[Records], Records]) -> Records:
        """Change the current records and save them, in one hold of the lock (so a change made
        meanwhile by another thread is never overwritten)."""
        with self.lock:
            updated = change(self.records())
            self.save(updated)
            return updated
