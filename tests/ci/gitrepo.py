"""Small real git repositories for the pipeline tests: make one, commit files, read hashes.

The pipeline's tests work on repositories made with the real `git` in a temp dir, the way a
spec repository would be: a work tree on `main` (or a bare one that pushes land in), commits of
a few files, and `tree_of` for the hash of `clusters/` that a reviewed plan is keyed by.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Tester",
    "GIT_AUTHOR_EMAIL": "tester@example.invalid",
    "GIT_COMMITTER_NAME": "Tester",
    "GIT_COMMITTER_EMAIL": "tester@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity and no user config; its stdout, stripped."""
    env = {**os.environ, **IDENTITY, "HOME": str(repo)}
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def init(repo: Path, *, bare: bool = False) -> Path:
    """A new repository at `repo` whose first branch is main."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "--quiet", "-b", "main", *(["--bare"] if bare else []))
    return repo


def commit(repo: Path, files: Mapping[str, str | None], message: str = "change") -> str:
    """Write (or, for None, delete) `files` in the work tree and commit them; the new sha."""
    for name, content in files.items():
        path = repo / name
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def tree_of(repo: Path, commit_ish: str, folder: str = "clusters") -> str:
    """The tree hash of `folder` at `commit_ish` (`git rev-parse <commit>:<folder>`)."""
    return git(repo, "rev-parse", f"{commit_ish}:{folder}")
