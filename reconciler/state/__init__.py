"""Recorded state: the state stores (files, memory, and a database: `sql/`), the ledger, the
orders mailbox and the reviewed plans.

The state is the reconciler's memory (records, intents, timers, blocklist, breaker) with
Terraform's identity fields, written under a lock; the ledger is the append-only history beside
it. See `store` for the rules every store follows, `filestore` for the files on disk, `lock` for
the file lock, `sql/` for SQLite and PostgreSQL (a lease for a lock, a compare-and-swap per
write), `backend` for choosing one by URL, `orders` for what commands leave for a running `watch`,
`reviewed` for the plans pull requests stored, `versions` for format upgrades and `ledger` for the
history.

May import `model`, `clock` and the error root; never `planning`, `applying`, `watch` or `cli`.
"""

from reconciler.state.errors import (
    LineageMismatchError,
    Liveness,
    LockFileUnreadableError,
    LockLostError,
    LockNotHeldError,
    SerialMismatchError,
    StateConflictError,
    StateCorruptError,
    StateError,
    StateLocked,
    StateLockedError,
    StateMissingError,
    StateTooNewError,
    StateUnreadableError,
    UnlockRefusedError,
)
from reconciler.state.filestore import BACKUP_FILE, LOCK_FILE, STATE_FILE, FileStore
from reconciler.state.ledger import (
    LEDGER_FILE,
    LedgerEntry,
    LedgerEvent,
    LedgerKind,
    LedgerLineSkipped,
    LedgerQuery,
    LedgerWriter,
    ledger_path,
    read_ledger,
)
from reconciler.state.lock import Identity, LockHolder
from reconciler.state.lockinfo import LockInfo
from reconciler.state.memory import MemoryBackend, MemoryStore
from reconciler.state.redact import MASK, redact
from reconciler.state.snapshot import StateSnapshot
from reconciler.state.store import StateStore, locked
from reconciler.state.versions import CURRENT_VERSION

__all__ = [
    "BACKUP_FILE",
    "CURRENT_VERSION",
    "LEDGER_FILE",
    "LOCK_FILE",
    "MASK",
    "STATE_FILE",
    "FileStore",
    "Identity",
    "LedgerEntry",
    "LedgerEvent",
    "LedgerKind",
    "LedgerLineSkipped",
    "LedgerQuery",
    "LedgerWriter",
    "LineageMismatchError",
    "Liveness",
    "LockFileUnreadableError",
    "LockHolder",
    "LockInfo",
    "LockLostError",
    "LockNotHeldError",
    "MemoryBackend",
    "MemoryStore",
    "SerialMismatchError",
    "StateConflictError",
    "StateCorruptError",
    "StateError",
    "StateLocked",
    "StateLockedError",
    "StateMissingError",
    "StateSnapshot",
    "StateStore",
    "StateTooNewError",
    "StateUnreadableError",
    "UnlockRefusedError",
    "ledger_path",
    "locked",
    "read_ledger",
    "redact",
]
