"""The few filesystem moves that make state crash-safe and private.

State and ledger files are 0600 inside a 0700 directory: they describe what the user rents and may
carry hostnames and addresses, and there is no legacy of shared working directories to protect
(conventions.md section 6). Modes are set with `fchmod` after creation because a umask can only
take bits away, and a file someone else created may be looser than we would make it.

A new file version is written to a temporary name in the same directory, flushed and fsynced, and
only then renamed over the old one; the directory is fsynced so the rename itself survives a power
cut. A crash at any point leaves either the old file or the new one, never a torn one, which is
the gap Terraform's local backend admits (conventions.md section 1.10).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
TEMP_SUFFIX = ".tmp"


def ensure_private_dir(path: Path) -> None:
    """Create `path` 0700 if missing; tighten it to 0700 if group or others have any access."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode != DIR_MODE and mode & 0o077:
        path.chmod(DIR_MODE)


def write_all(fd: int, data: bytes) -> None:
    """`os.write` may write less than asked (a full disk, a signal); loop until all is written."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(path: Path) -> None:
    """Make renames and unlinks in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(path: Path) -> Path:
    """A fresh temporary name beside `path`: `<name>.<random>.tmp`."""
    return path.with_name(f"{path.name}.{uuid.uuid4().hex[:16]}{TEMP_SUFFIX}")


def create_private(path: Path, *, flags: int = os.O_WRONLY) -> int:
    """Create `path` exclusively (O_CREAT|O_EXCL), 0600, and return its descriptor."""
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_temp(path: Path, data: bytes) -> Path:
    """Write `data` durably to a new temporary file beside `path`, and return its name."""
    temp = temp_path_for(path)
    fd = create_private(temp)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return temp


def leftover_temps(path: Path) -> list[Path]:
    """Temporary files of `path` left by a writer that crashed before its rename."""
    return sorted(path.parent.glob(f"{path.name}.*{TEMP_SUFFIX}"))


def tighten_file(path: Path) -> None:
    """Make an existing file 0600 if it is looser (a file copied in by hand, say)."""
    if path.stat().st_mode & 0o077:
        path.chmod(FILE_MODE)
