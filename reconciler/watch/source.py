"""Where watch gets its desired state: a spec directory, optionally a Git checkout it keeps pulled.

The directory is fingerprinted on every tick (names, sizes, contents) so a changed spec is acted on
at once, not on the next reconcile. With a Git remote, the checkout is fetched and reset to the
branch every interval and the revision acted on is recorded. A spec that does not load keeps the
previous desired state in force and says why: a typo must not tear a cluster down.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reconciler.childenv import child_environment
from reconciler.clock import Clock
from reconciler.errors import RayVastError
from reconciler.spec.loader import LoadResult, load, spec_files


class GitError(RayVastError):
    """git could not fetch or check out the spec repository."""


def fingerprint(path: Path) -> str:
    digest = hashlib.sha256()
    for file in spec_files(path) if path.exists() else []:
        digest.update(str(file).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


@dataclass
class GitSync:
    """A checkout of `branch` of `remote` in `checkout`, refreshed every `interval` seconds."""

    remote: str
    branch: str
    checkout: Path
    interval: float
    clock: Clock
    last_sync: float | None = None
    revision: str | None = None

    def due(self) -> bool:
        return self.last_sync is None or self.clock.now() - self.last_sync >= self.interval

    def sync(self) -> str:
        if not (self.checkout / ".git").exists():
            self.checkout.parent.mkdir(parents=True, exist_ok=True)
            self._git(
                "clone",
                "--quiet",
                "--branch",
                self.branch,
                self.remote,
                str(self.checkout),
                cwd=self.checkout.parent,
            )
        else:
            self._git("fetch", "--quiet", "origin", self.branch)
            self._git("reset", "--quiet", "--hard", f"origin/{self.branch}")
        self.revision = self._git("rev-parse", "HEAD").strip()
        self.last_sync = self.clock.now()
        return self.revision

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        where = cwd or self.checkout
        try:
            done = subprocess.run(
                ["git", *args],
                cwd=where,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
                env=child_environment(),
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise GitError(f"git {args[0]} failed: {str(detail).strip()}") from exc
        return done.stdout


@dataclass
class SpecSource:
    path: Path
    git: GitSync | None = None
    seen: str | None = None

    def poll(self) -> LoadResult | None:
        """A fresh load when the specs changed since the last poll, else None."""
        if self.git is not None and self.git.due():
            self.git.sync()
        current = fingerprint(self.path)
        if current == self.seen:
            return None
        self.seen = current
        return load(self.path)

    @property
    def revision(self) -> str | None:
        return self.git.revision if self.git else None
