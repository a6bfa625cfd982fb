"""What can go wrong with recorded state, as one tree the CLI can render and map to exit codes.

```
StateError
├── StateLockedError         another writer holds the lock (its details; whether it looks stale)
├── LockFileUnreadableError  a lock file we cannot read: only a human can judge it
├── LockNotHeldError         a write or an unlock without holding the lock
│   └── LockLostError        the lock this store held was force-unlocked meanwhile
├── UnlockRefusedError       force-unlock with no lock, or with an ID that is not the lock's
├── StateConflictError       a write based on a state that is not the current one
│   ├── LineageMismatchError a different lineage: a copied or foreign state must not overwrite
│   └── SerialMismatchError  the state changed since it was read
└── StateUnreadableError     the state on disk cannot be used as it is; never read as "empty"
    ├── StateCorruptError    not JSON, or not a ray-vast state envelope
    ├── StateMissingError    state.json is gone but its backup is there
    └── StateTooNewError     written by a newer ray-vast, in a format this one does not know
```

`StateLocked` is the name issue 5 gives the lock refusal; it is kept as an alias of
`StateLockedError`, whose suffix follows the house rule (N818).
```

Every message names the file and says what a person can do next, because these errors end a run
that was about to spend money, and the person reading them is deciding whether it is safe to retry.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from reconciler.errors import RayVastError
from reconciler.state.lockinfo import LockInfo


class StateError(RayVastError):
    """Base of every recorded-state error."""


class Liveness(StrEnum):
    """What can be told about the process that holds a lock."""

    ALIVE = "alive"  # it still holds the file lock (or the store cannot die: the memory store)
    DEAD = "dead"  # same host, and nobody holds the file lock: its owner exited without unlocking
    UNKNOWN = "unknown"  # taken on another host: liveness cannot be checked from here
    # A database lease: its holder's session is gone but the lease has not lapsed yet (taken over
    # once it does), or it lapsed while the holder's session is still open (stuck, or cut off).
    LAPSING = "lapsing"
    STUCK = "stuck"


def utc_text(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def render_lock_info(info: LockInfo) -> str:
    """Terraform's `Lock Info:` block, so people who know that tool recognise it."""
    return "\n".join(
        [
            "Lock Info:",
            f"  ID:        {info.id}",
            f"  Operation: {info.operation}",
            f"  Who:       {info.who}",
            f"  PID:       {info.pid}",
            f"  Version:   {info.version}",
            f"  Created:   {utc_text(info.created)}",
            f"  Path:      {info.path}",
            *([f"  Fencing:   {info.fencing}"] if info.fencing else []),
            *([f"  CI run:    {info.ci_url}"] if info.ci_url else []),
        ]
    )


_LIVENESS_TEXT = {
    Liveness.ALIVE: "Process {pid} on {host} still holds it.",
    Liveness.DEAD: (
        "The lock looks STALE: process {pid} on {host} no longer holds it (the process has exited"
        " without unlocking), but it changed while ray-vast tried to take it over."
    ),
    Liveness.UNKNOWN: (
        "It was taken on host {host}; whether process {pid} is still running cannot be checked"
        " from here."
    ),
    Liveness.LAPSING: (
        "Its holder's database session is gone (process {pid} on {host} died or lost its"
        " connection); its lease lapses in {left}, and the next locker takes it over then."
    ),
    Liveness.STUCK: (
        "Its lease lapsed {left} ago, but its holder's database session is still open: process"
        " {pid} on {host} is stuck or cut off from the database. It is not taken over while that"
        " session lives."
    ),
}


class StateLockedError(StateError):
    """The lock is held by someone else; carries the holder's details."""

    def __init__(
        self,
        info: LockInfo,
        *,
        liveness: Liveness,
        lock_path: Path | str,
        waited_seconds: float = 0.0,
        lease_left: float | None = None,
    ) -> None:
        self.info = info
        self.liveness = liveness
        self.lock_path = lock_path
        self.waited_seconds = waited_seconds
        self.lease_left = lease_left
        waited = f" after waiting {waited_seconds:g}s" if waited_seconds > 0 else ""
        left = f"{abs(lease_left):.0f} s" if lease_left is not None else "?"
        lease = (
            f"\n  Lease:     expires in {lease_left:.0f} s"
            if lease_left is not None and lease_left > 0
            else ""
        )
        super().__init__(
            f"Error acquiring the state lock{waited}\n\n"
            f"The state lock {lock_path} is held.\n"
            f"{render_lock_info(info)}{lease}\n\n"
            + _LIVENESS_TEXT[liveness].format(pid=info.pid, host=info.host, left=left)
            + "\nray-vast refuses to run two writers on one state. If you are sure no ray-vast"
            " process is using this state any more, remove the lock with:\n"
            f"  ray-vast state force-unlock {info.id}"
        )

    @property
    def stale(self) -> bool:
        """The holder is known to be gone (such a lock is taken over; refused only in a race)."""
        return self.liveness is Liveness.DEAD


StateLocked = StateLockedError


class LockFileUnreadableError(StateError):
    """A lock file that cannot be parsed: its owner and ID are unknown; only a human can judge."""

    def __init__(self, lock_path: Path, reason: str) -> None:
        self.lock_path = lock_path
        super().__init__(
            f"The state lock {lock_path} exists but cannot be read ({reason}). Make sure no"
            " ray-vast process is using this state, then delete that file by hand."
        )


class LockNotHeldError(StateError):
    """A write or an unlock by a store that does not hold the lock."""


class LockLostError(LockNotHeldError):
    """The lock this store held was removed by a force-unlock; writing now would fork the state."""


class UnlockRefusedError(StateError):
    """Force-unlock was given no lock to remove, or the wrong ID."""


class StateConflictError(StateError):
    """A write was based on a state other than the current one."""


class LineageMismatchError(StateConflictError):
    """The write's lineage differs from the state's: a foreign or copied state."""


class SerialMismatchError(StateConflictError):
    """The state moved on (its serial changed) since the snapshot the write is based on."""


class StateUnreadableError(StateError):
    """The state on disk cannot be used; callers must stop rather than start from empty."""


class StateCorruptError(StateUnreadableError):
    """Not JSON, or not a ray-vast state envelope."""


class StateMissingError(StateUnreadableError):
    """The state file is gone but its backup exists: someone removed it, do not start afresh."""


class StateTooNewError(StateUnreadableError):
    """Written in a format version newer than this ray-vast knows."""


class LocalFileError(StateUnreadableError):
    """A path of the state directory that the filesystem refuses; nothing was changed."""

    def __init__(self, exc: OSError, *, state_dir: Path, path: Path) -> None:
        self.path = Path(exc.filename) if exc.filename else path
        super().__init__(local_problem(exc, state_dir=state_dir, path=self.path))


def local_problem(exc: OSError, *, state_dir: Path, path: Path) -> str:
    """One line for an `OSError` on a path of the state directory: what is wrong, what to do."""
    if state_dir.exists() and not state_dir.is_dir():
        return (
            f"{state_dir} is not a directory, but the state directory must be one (it comes from"
            " --state-dir, else $RAY_VAST_STATE_DIR, else .ray-vast/ in the working directory)."
            " Point it at a directory, or move that file away. Nothing was changed."
        )
    if isinstance(exc, IsADirectoryError):
        return (
            f"{path} is a directory, where ray-vast keeps a file. Move that directory away and"
            " retry. Nothing was changed."
        )
    if isinstance(exc, PermissionError):
        return (
            f"{path} cannot be used: permission denied. Run ray-vast as the user who owns the"
            " state, or give that user access (0700 for the directory, 0600 for its files)."
            " Nothing was changed."
        )
    reason = exc.strerror or str(exc)
    return f"{path} cannot be used: {reason}. Check that path and retry. Nothing was changed."
