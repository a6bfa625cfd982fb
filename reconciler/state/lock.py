"""The state lock: who holds it, how a file lock is taken, and how a waiting locker retries.

One writer at a time (DESIGN.md section 9). The file lock is `state.lock` beside the state, and it
must tell three situations apart: held by a live process, left behind by a dead one, and free.

- A lock file alone cannot tell the first two apart, so its owner also holds `flock(LOCK_EX)` on it
  for as long as it holds the lock. The kernel drops that when the process dies, however it dies.
  A locker that finds the file present but the flock free knows the owner is gone (on this host),
  and takes the lock over, as Terraform's local backend is not blocked by a dead process's lock:
  it flocks the dead owner's file (so two takers cannot both win), checks it is still the file at
  `state.lock` with the same ID, and renames its own complete, flocked lock file over it. The
  caller is told whose lock it replaced, to say so and note it in the ledger. A live owner, or a
  lock taken on another host (whose liveness cannot be checked from here), is still refused:
  breaking those is a human decision (`ray-vast state force-unlock ID`).
- The lock file is published complete and already flocked: the owner creates a private temporary
  file with O_CREAT|O_EXCL, flocks it, writes and fsyncs the lock info, then `link`s it to
  `state.lock`. `link` fails if the name exists, so it is the exclusive create; and no other
  process can ever see a lock file that is empty or not yet flocked, which would look stale.
- flock (not fcntl/lockf) because it belongs to the open file, not to the process: two stores in
  one process contend exactly like two processes, which is what the tests rely on.

Waiting for a lock (`--lock-timeout`) retries on the injected clock, backing off from 1 s and
doubling up to 16 s, as Terraform does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reconciler.clock import Clock
from reconciler.state.errors import (
    Liveness,
    LockFileUnreadableError,
    StateLockedError,
    UnlockRefusedError,
)
from reconciler.state.files import create_private, fsync_dir, write_all
from reconciler.state.lockinfo import LockInfo

FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 16.0
# A lock released between our look and our flock makes us look again at once; after this many
# looks in a row we wait like for any held lock instead of spinning.
IMMEDIATE_RETRIES = 5
_CHANGED = object()


@dataclass(frozen=True)
class Identity:
    """Who is taking locks: `user@host` and the process id."""

    who: str
    pid: int

    @property
    def host(self) -> str:
        return self.who.rpartition("@")[2]

    @classmethod
    def current(cls) -> Identity:
        """This process. The user comes from the password database, not from $USER."""
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:  # a container user with no passwd entry
            user = str(uid)
        return cls(who=f"{user}@{socket.gethostname()}", pid=os.getpid())


@dataclass(frozen=True)
class LockHolder:
    """A lock as someone else sees it: its info and whether its owner is still there."""

    info: LockInfo
    liveness: Liveness
    # A lease's time left by the database's clock (negative: lapsed); None for a file lock.
    lease_left: float | None = None


@dataclass(frozen=True)
class Acquired:
    """The lock, taken: the descriptor that holds its flock, and the dead owner's lock it
    replaced, if it was taken over."""

    fd: int
    taken_over: LockInfo | None = None


def wait_for_lock(
    attempt: Callable[[], LockInfo | StateLockedError], *, clock: Clock, timeout_seconds: float
) -> LockInfo:
    """Call `attempt` until it returns the lock, sleeping on `clock` until the timeout is spent.

    `attempt` returns the refusal rather than raising it, so that the last one, with the newest
    holder details and the time waited, is what the caller finally sees.
    """
    start = clock.now()
    delay = FIRST_RETRY_SECONDS
    while True:
        outcome = attempt()
        if isinstance(outcome, LockInfo):
            return outcome
        waited = clock.now() - start
        remaining = timeout_seconds - waited
        if remaining <= 0:
            if waited > 0:
                raise StateLockedError(
                    outcome.info,
                    liveness=outcome.liveness,
                    lock_path=outcome.lock_path,
                    waited_seconds=waited,
                    lease_left=outcome.lease_left,
                )
            raise outcome
        clock.sleep(min(delay, remaining))
        delay = min(delay * 2, MAX_RETRY_SECONDS)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _info_id(data: bytes) -> str | None:
    try:
        return LockInfo.from_json(json.loads(data)).id
    except (UnicodeDecodeError, ValueError):
        return None


def _read_fd(fd: int) -> bytes:
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 65536, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


class LockFile:
    """The mechanics of one `state.lock`; the store decides when to use them."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def try_acquire(self, info: LockInfo) -> Acquired | LockHolder:
        """Take the lock (over a dead owner's, on this host), or return the current holder."""
        for _ in range(IMMEDIATE_RETRIES):
            fd = self._publish(info)
            if fd is not None:
                return Acquired(fd)
            holder = self.holder(host=info.host)
            if holder is not None and holder.liveness is Liveness.DEAD:
                fd = self._take_over(info, holder.info)
                if fd is not None:
                    return Acquired(fd, taken_over=holder.info)
                continue  # someone else is looking at it, or took it first: look again
            if holder is not None:
                return holder
            # Released between our link and our look: try again at once.
        holder = self.holder(host=info.host)
        if holder is None:
            raise LockFileUnreadableError(self.path, "it keeps appearing and vanishing")
        return holder

    def _prepared(self, info: LockInfo) -> tuple[Path, int]:
        """A private temporary lock file, flocked, with `info` written and fsynced."""
        temp = self.path.with_name(f"{self.path.name}.{info.id}.tmp")
        fd = create_private(temp, flags=os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: cannot be contended
            write_all(fd, json.dumps(info.to_json(), indent=2).encode() + b"\n")
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        return temp, fd

    def _publish(self, info: LockInfo) -> int | None:
        if self.path.exists():
            return None
        temp, fd = self._prepared(info)
        try:
            try:
                os.link(temp, self.path)
            except FileExistsError:
                os.close(fd)
                return None
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        finally:
            temp.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
        return fd

    def _take_over(self, info: LockInfo, dead: LockInfo) -> int | None:
        """Replace the dead owner's lock with ours; None if it is not that lock any more.

        Holding the dead file's flock while we check and rename is what makes one taker win:
        another taker cannot flock it meanwhile, and once it can, `state.lock` is ours.
        """
        try:
            old = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(old, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            if not _same_file(old, self.path) or _info_id(_read_fd(old)) != dead.id:
                return None
            temp, fd = self._prepared(info)
            try:
                os.rename(temp, self.path)
            except BaseException:
                os.close(fd)
                temp.unlink(missing_ok=True)
                raise
            fsync_dir(self.path.parent)
            return fd
        finally:
            os.close(old)  # drops our flock of the dead file, which is no longer `state.lock`

    def holder(self, *, host: str) -> LockHolder | None:
        """Who holds the lock now, and whether they are alive; None if there is no lock.

        `host` is the looker's: a free flock proves the holder dead only if it ran on this host.
        """
        for _ in range(IMMEDIATE_RETRIES):
            seen = self._look(host)
            if seen is None or isinstance(seen, LockHolder):
                return seen
        raise LockFileUnreadableError(self.path, "it keeps being replaced while it is read")

    def _look(self, host: str) -> LockHolder | object | None:
        """One look; `_CHANGED` if `state.lock` was replaced (a take-over) while we looked."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            data = _read_fd(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                flock_free = False
                if not _same_file(fd, self.path):
                    return _CHANGED  # a taker held the dead file's flock and replaced it
            else:
                flock_free = True
                fcntl.flock(fd, fcntl.LOCK_UN)
                if not _same_file(fd, self.path):
                    return None  # released (unlinked, then unlocked) while we looked
        finally:
            os.close(fd)
        try:
            info = LockInfo.from_json(json.loads(data))
        except (UnicodeDecodeError, ValueError) as exc:
            raise LockFileUnreadableError(self.path, str(exc)) from exc
        if not flock_free:
            return LockHolder(info, Liveness.ALIVE)
        return LockHolder(info, Liveness.DEAD if info.host == host else Liveness.UNKNOWN)

    def owns(self, fd: int) -> bool:
        """Whether `state.lock` is still the file this descriptor locked (no force-unlock since)."""
        return _same_file(fd, self.path)

    def release(self, fd: int) -> bool:
        """Remove our lock file, then drop the flock. False if it was no longer ours."""
        try:
            if not self.owns(fd):
                return False
            self.path.unlink()
            fsync_dir(self.path.parent)
            return True
        finally:
            os.close(fd)

    def remove(self, lock_id: str, *, host: str) -> LockHolder:
        """Remove the lock if, and only if, its ID is `lock_id` (the ID acts as a nonce)."""
        holder = self.holder(host=host)
        if holder is None:
            raise UnlockRefusedError(f"There is no state lock at {self.path}: nothing to unlock.")
        if holder.info.id != lock_id:
            raise UnlockRefusedError(
                f"The state lock {self.path} has a different ID than {lock_id!r}; it may have been"
                " released and taken again since you saw it. Nothing was unlocked."
            )
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
        return holder
