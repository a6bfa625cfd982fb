"""Local stand-ins for the `uses:` actions a ray-vast pipeline calls, for the test runner.

`actions/checkout` becomes a detached `git worktree add` of the repository under test (a clone
when that repository is bare, as a forge's is), at the event's sha or the step's `ref`;
`actions/upload-artifact` and `actions/download-artifact` copy files into and out of one
directory per artifact name. Each returns an exit code and a line of output, as a step would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Outcome:
    """What a stubbed action did: its exit code and what it printed."""

    code: int
    output: str


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run git quietly, capturing what it says (no terminal prompts)."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )


@dataclass
class Checkouts:
    """The work trees the runner made, so that they are removed when it is done."""

    repository: Path
    made: list[Path] = field(default_factory=list)

    def bare(self) -> bool:
        """Whether the repository under test is bare (then it is cloned, not worktree'd)."""
        answer = git("rev-parse", "--is-bare-repository", cwd=self.repository)
        return answer.stdout.strip() == "true"

    def checkout(self, where: Path, sha: str) -> Outcome:
        """`where` becomes a detached checkout of `sha`; it must be absent or empty."""
        where.mkdir(parents=True, exist_ok=True)
        if any(where.iterdir()):
            return Outcome(1, f"checkout: {where} is not empty")
        if self.bare():
            steps = [
                ("clone", "--quiet", "--no-checkout", str(self.repository), str(where)),
                ("-C", str(where), "checkout", "--quiet", "--detach", sha),
            ]
        else:
            steps = [("worktree", "add", "--quiet", "--detach", str(where), sha)]
            self.made.append(where)
        said = []
        for argv in steps:
            done = git(*argv, cwd=self.repository)
            said.append(done.stdout + done.stderr)
            if done.returncode != 0:
                return Outcome(done.returncode, "".join(said))
        return Outcome(0, "".join(said) + f"checked out {sha} in {where}\n")

    def remove_all(self) -> None:
        """Unregister and delete every worktree made (clones live in the job dirs)."""
        for where in self.made:
            git("worktree", "remove", "--force", str(where), cwd=self.repository)
        self.made.clear()
        git("worktree", "prune", cwd=self.repository)


def paths_in(spec: str) -> list[str]:
    """The `path:` input of an artifact action: one path or glob per line."""
    return [line.strip().rstrip("/") for line in spec.splitlines() if line.strip()]


def upload(store: Path, name: str, spec: str, workspace: Path) -> Outcome:
    """Copy the files `spec` names (relative to the workspace) into the artifact `name`, laid out
    as GitHub does: relative to the deepest folder that holds them all."""
    files: list[Path] = []
    for pattern in paths_in(spec):
        for found in sorted(workspace.glob(pattern)):
            inside = sorted(f for f in found.rglob("*") if f.is_file())
            files.extend(inside if found.is_dir() else [found])
    if not files:
        return Outcome(0, f"warning: no files found for artifact {name}\n")
    folders = [f.parent for f in files]
    for pattern in paths_in(spec):
        folders.extend(d for d in workspace.glob(pattern) if d.is_dir())
    root = Path(os.path.commonpath(folders))
    for source in files:
        destination = store / name / source.relative_to(root)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    return Outcome(0, f"uploaded {len(files)} file(s) as {name}\n")


def download(store: Path, name: str, path: str, workspace: Path) -> Outcome:
    """Copy the artifact `name` into `path` (relative to the workspace; default the workspace)."""
    source = store / name
    if not source.is_dir():
        return Outcome(1, f"error: artifact {name} not found\n")
    target = workspace / path if path else workspace
    shutil.copytree(source, target, dirs_exist_ok=True)
    return Outcome(0, f"downloaded {name} to {target}\n")
