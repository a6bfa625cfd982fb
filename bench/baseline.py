"""One benchmark, this checkout's, run on another commit's code in the same run (issue 25).

A figure measured on a shared machine wanders by tens of percent from one hour to the next, so a
change is measured against the commit before it side by side: `checkout(rev)` makes a detached
`git worktree` of `rev` (removed afterwards), and `run_there(tree, script, args)` runs this
checkout's benchmark script in a fresh interpreter whose `reconciler` (and everything else but the
`bench` package) is imported from that tree, and returns what the script printed as JSON.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# this checkout's `bench` package first (bound before the tree goes on the path), then the tree;
# the script runs as a module of that package (`python -m bench.x`), so a script that puts this
# checkout on the path when run by its file name (`__package__` empty) does not put it before
# the tree (bench/heartbeat_scale.py's baseline measured this checkout's head so)
RUNNER = """
import pathlib, runpy, sys
root, tree, script = sys.argv[1:4]
sys.path.insert(0, root)
import bench  # noqa: F401 - this checkout's benchmarks, whatever the tree holds
sys.path.insert(0, tree)
sys.argv = [script, *sys.argv[4:]]
runpy.run_module("bench." + pathlib.Path(script).stem, run_name="__main__", alter_sys=True)
"""


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A detached worktree of `rev`, removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="rv-baseline-") as parent:
        tree = Path(parent) / "tree"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            yield tree
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=False)


def run_there(tree: Path, script: str, args: Sequence[str]) -> Any:
    """`script` (a path of this checkout) run on `tree`'s code; the JSON of its last line."""
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(ROOT), str(tree), str(ROOT / script), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
