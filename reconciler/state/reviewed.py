"""Reviewed plans: a pull request's plan, kept in the state's backend under its spec tree's hash.

A plan made on a pull request (`ray-vast plan DIR -out FILE --review`) is stored with the git tree
hash of the spec directory it planned (`git rev-parse HEAD:DIR`). The merge applies exactly the
plan stored under the tree it merged (`apply --reviewed DIR`), or refuses as stale: the reviewed
content and the merged content are the same exactly when their tree hashes are. A newer plan of
the same tree supersedes the older one; once applied (or found stale) a plan is never applied
again. Files here for a state of files (`<state dir>/reviewed/`), `rv_plans` for a database.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Protocol

from reconciler.state.files import ensure_private_dir, fsync_dir, write_temp

PENDING, APPLIED, STALE = "pending", "applied", "stale"
TREE = re.compile(r"^[0-9a-f]{40,64}$")
REVIEWED_DIR = "reviewed"


@dataclass(frozen=True)
class Reviewed:
    """One stored plan: its spec tree, the commit it was made on, by whom and when, its status
    (pending, applied or stale), and the plan file's bytes."""

    tree: str
    commit: str
    status: str
    created_at: float
    created_by: str
    plan: bytes
    outcome: str = ""  # what the apply said (when applied or found stale)


class ReviewedPlans(Protocol):
    def put(self, reviewed: Reviewed) -> None: ...

    def get(self, tree: str) -> Reviewed | None: ...

    def mark(self, tree: str, status: str, outcome: str, *, only_from: str | None = None) -> None:
        """Set a plan's status (`only_from`: unless it is no longer that)."""
        ...


class FileReviewedPlans:
    """`<state dir>/reviewed/<tree>.json`, each written whole (0600) or not at all."""

    def __init__(self, state_dir: Path) -> None:
        self.folder = state_dir / REVIEWED_DIR

    def _path(self, tree: str) -> Path:
        if not TREE.match(tree):
            raise ValueError(f"not a git tree hash: {tree!r}")
        return self.folder / f"{tree}.json"

    def put(self, reviewed: Reviewed) -> None:
        ensure_private_dir(self.folder)
        doc = {**asdict(reviewed), "plan": reviewed.plan.decode()}
        path = self._path(reviewed.tree)
        temp = write_temp(path, json.dumps(doc, sort_keys=True).encode())
        os.replace(temp, path)
        fsync_dir(self.folder)

    def get(self, tree: str) -> Reviewed | None:
        try:
            doc = json.loads(self._path(tree).read_text())
        except FileNotFoundError:
            return None
        return Reviewed(**{**doc, "plan": doc["plan"].encode()})

    def mark(self, tree: str, status: str, outcome: str, *, only_from: str | None = None) -> None:
        found = self.get(tree)
        if found is not None and only_from in (None, found.status):
            self.put(replace(found, status=status, outcome=outcome))
