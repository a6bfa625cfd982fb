"""The real state store: `state.json`, `state.json.backup` and `state.lock` in a private directory.

The caller gives the directory (the CLI resolves `.ray-vast/`, `--state-dir` or
`RAY_VAST_STATE_DIR`); nothing here reads the environment. Constructing a store does no I/O: the
directory is created (0700) or tightened when the lock is first taken, since every writer locks.

A write, under the lock:

1. re-read the current state from disk and check the write's basis against it;
2. hard-link the current file to a temporary name and rename that over `state.json.backup`, so the
   backup is the previous version, atomically, without copying it;
3. write the new version to a temporary file, fsync it, rename it over `state.json`, fsync the
   directory.

A crash anywhere leaves a readable `state.json` (old or new) and a backup at most one version
behind. Temporary files a crash leaves behind are removed when the lock is next taken. A
`state.json` that does not parse is reported with a pointer to the backup, never read as empty.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from reconciler import __version__
from reconciler.clock import Clock
from reconciler.state.errors import (
    Liveness,
    LocalFileError,
    LockLostError,
    LockNotHeldError,
    StateCorruptError,
    StateError,
    StateLockedError,
    StateMissingError,
    StateUnreadableError,
    render_lock_info,
    utc_text,
)
from reconciler.state.files import (
    ensure_private_dir,
    fsync_dir,
    leftover_temps,
    temp_path_for,
    tighten_file,
    write_temp,
)
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter, ledger_path
from reconciler.state.lock import (
    Acquired,
    Identity,
    LockFile,
    LockHolder,
    wait_for_lock,
)
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

STATE_FILE = "state.json"
BACKUP_FILE = "state.json.backup"
LOCK_FILE = "state.lock"
# The ledger's cluster field for what is about the whole state rather than one cluster.
WHOLE_STATE = "*"
TAKEN_OVER_CLASS = "lock_taken_over"

_log = logging.getLogger(__name__)


class FileStore:
    """A `StateStore` in a directory on the local filesystem."""

    def __init__(
        self,
        state_dir: Path,
        *,
        clock: Clock,
        secrets: Iterable[str] = (),
        tool_version: str = __version__,
        identity: Identity | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.path = state_dir / STATE_FILE
        self.backup_path = state_dir / BACKUP_FILE
        self.lock_path = state_dir / LOCK_FILE
        self._clock = clock
        self._secrets = normalise_secrets(secrets)
        self._tool_version = tool_version
        self._identity = identity
        self._lockfile = LockFile(self.lock_path)
        self._fd: int | None = None
        self._held: LockInfo | None = None
        self._taken_over: LockInfo | None = None
        # The dead owner's lock the last `lock()` took over, if it did.
        self.taken_over: LockInfo | None = None

    # -- reading -------------------------------------------------------------------------------

    def read(self) -> StateSnapshot | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            if self.backup_path.exists():
                raise StateMissingError(
                    f"{self.path} is missing, but {self.backup_path} exists: the state was"
                    " removed by hand. ray-vast will not start a new, empty state over it. Copy"
                    f" the backup to {self.path} (or move the directory away) and retry."
                ) from None
            return None
        except OSError as exc:
            raise LocalFileError(exc, state_dir=self.state_dir, path=self.path) from exc
        try:
            return decode(data, str(self.path))
        except StateCorruptError as exc:
            raise StateCorruptError(f"{exc}. {self._backup_hint()}") from exc

    def _backup_hint(self) -> str:
        try:
            backup = decode(self.backup_path.read_bytes(), str(self.backup_path))
        except FileNotFoundError:
            return (
                f"There is no backup ({self.backup_path} does not exist): repair the file or"
                " restore it from a copy of your own; ray-vast will not read it as empty."
            )
        except OSError as exc:
            return f"The backup {self.backup_path} cannot be read either ({exc.strerror})."
        except StateUnreadableError as exc:
            return f"The backup {self.backup_path} cannot be read either: {exc}"
        return (
            f"The previous version is in {self.backup_path} (lineage {backup.lineage}, serial"
            f" {backup.serial}). Inspect both files; to recover, copy the backup over {self.path}."
            " Instances rented after that version still carry this state's lineage in their"
            " labels, so the provider's listing shows them."
        )

    # -- writing -------------------------------------------------------------------------------

    def write(self, records: Records, *, based_on: StateSnapshot | None) -> StateSnapshot:
        self._require_lock()
        prepared = prepare_records(records, self._secrets)
        current = self.read()
        check_basis(current, based_on, str(self.path))
        snapshot = next_snapshot(current, prepared, tool_version=self._tool_version)
        if snapshot is None:
            assert current is not None
            return current
        data = encode(snapshot)
        self._commit(data)
        return decode(data, str(self.path))

    def push(self, snapshot: StateSnapshot) -> StateSnapshot:
        self._require_lock()
        refuse_push(self.read(), str(self.path))
        data = encode(snapshot)
        self._commit(data)
        return decode(data, str(self.path))

    def check_lease(self) -> None:
        self._require_lock()

    def _commit(self, data: bytes) -> None:
        if self.path.exists():
            self._keep_backup()
        temp = write_temp(self.path, data)
        try:
            self._replace(temp, self.path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        fsync_dir(self.state_dir)

    def _keep_backup(self) -> None:
        temp = temp_path_for(self.backup_path)
        os.link(self.path, temp)
        try:
            tighten_file(temp)
            self._replace(temp, self.backup_path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _replace(self, src: Path, dst: Path) -> None:
        """The atomic rename; a hook so tests can simulate a crash just before it."""
        os.replace(src, dst)

    # -- locking -------------------------------------------------------------------------------

    @property
    def held(self) -> LockInfo | None:
        return self._held

    def lock(self, operation: str, *, timeout_seconds: float = 0.0) -> LockInfo:
        if self._held is not None:
            raise StateError(f"this store already holds the state lock {self._held.id}")
        try:
            ensure_private_dir(self.state_dir)
            info = wait_for_lock(
                lambda: self._try_lock(operation),
                clock=self._clock,
                timeout_seconds=timeout_seconds,
            )
        except OSError as exc:
            raise LocalFileError(exc, state_dir=self.state_dir, path=self.lock_path) from exc
        self._held = info
        self.taken_over, self._taken_over = self._taken_over, None
        if self.taken_over is not None:
            self._note_take_over(self.taken_over, info)
        self._remove_leftover_temps()
        return info

    def _note_take_over(self, dead: LockInfo, info: LockInfo) -> None:
        """Say so on stderr (a warning: the CLI's stream, or Python's last resort) and in the
        ledger, with the dead owner's details."""
        message = (
            f"Took over the state lock {self.lock_path}: its owner, `{dead.operation}` (pid"
            f" {dead.pid} on {dead.host}, since {utc_text(dead.created)}), no longer holds it; the"
            " process ended without unlocking. Going on from the last saved state."
        )
        _log.warning("%s\n%s", message, render_lock_info(dead))
        data = {"dead": dead.to_json(), "lock_id": info.id, "operation": info.operation}
        with LedgerWriter.open(
            ledger_path(self.state_dir), clock=self._clock, secrets=self._secrets
        ) as ledger:
            ledger.append(
                LedgerEvent(WHOLE_STATE, LedgerKind.NOTE, TAKEN_OVER_CLASS, message, data=data)
            )

    def _try_lock(self, operation: str) -> LockInfo | StateLockedError:
        info = new_lock_info(
            operation=operation,
            identity=self._me(),
            clock=self._clock,
            tool_version=self._tool_version,
            path=str(self.path),
        )
        got = self._lockfile.try_acquire(info)
        if isinstance(got, LockHolder):
            return StateLockedError(got.info, liveness=got.liveness, lock_path=self.lock_path)
        assert isinstance(got, Acquired)
        self._fd, self._taken_over = got.fd, got.taken_over
        return info

    def _remove_leftover_temps(self) -> None:
        """Only the lock holder writes temporaries, so any found now are from a crashed writer."""
        for temp in leftover_temps(self.path):
            temp.unlink(missing_ok=True)

    def unlock(self) -> None:
        fd, held = self._fd, self._held
        if fd is None or held is None:
            raise LockNotHeldError(f"this store does not hold the state lock {self.lock_path}")
        self._fd = self._held = None
        if not self._lockfile.release(fd):
            raise LockLostError(self._lost_message(held))

    def force_unlock(self, lock_id: str) -> LockHolder:
        if self._held is not None and self._held.id == lock_id:
            held = self._held
            self.unlock()
            return LockHolder(held, Liveness.ALIVE)
        return self._lockfile.remove(lock_id, host=self._me().host)

    def lock_holder(self) -> LockHolder | None:
        return self._lockfile.holder(host=self._me().host)

    def _me(self) -> Identity:
        """This process's identity, looked up when first needed rather than at construction."""
        if self._identity is None:
            self._identity = Identity.current()
        return self._identity

    def _require_lock(self) -> None:
        if self._fd is None or self._held is None:
            raise LockNotHeldError(
                f"writing {self.path} needs the state lock; take it with lock() first"
            )
        if not self._lockfile.owns(self._fd):
            raise LockLostError(self._lost_message(self._held))

    def _lost_message(self, held: LockInfo) -> str:
        return (
            f"The state lock {held.id} held by this process was removed (force-unlock) and"
            f" {self.lock_path} is no longer ours. Stopping without writing: another ray-vast"
            " may be writing this state now."
        )
