"""What a state lock records about its holder: its own module, because both the lock and the
errors that name a holder read it (the lock imports the errors; the errors import only this).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class LockInfo:
    """What the lock records about its holder; printed in full when someone else is refused."""

    id: str
    operation: str
    who: str  # user@host
    pid: int
    created: float  # epoch seconds, from the holder's clock
    version: str  # the holder's ray-vast version
    path: str  # the state file the lock guards (or the database's state, for a lease)
    # A lease's fencing token (it only grows; 0: a file lock, which has none) and the CI run the
    # holder belongs to, when it runs in one (GitHub's run URL).
    fencing: int = 0
    ci_url: str = ""

    @property
    def host(self) -> str:
        return self.who.rpartition("@")[2]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> LockInfo:
        """Parse lock info; `ValueError` if any field is missing or of the wrong type."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        kinds = {"id": str, "operation": str, "who": str, "pid": int, "version": str, "path": str}
        for name, kind in kinds.items():
            if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
                raise ValueError(f"`{name}` missing or not {kind.__name__}")
        created = doc.get("created")
        if not isinstance(created, int | float) or isinstance(created, bool):
            raise ValueError("`created` missing or not a number")
        fencing, ci_url = doc.get("fencing", 0), doc.get("ci_url", "")
        if not isinstance(fencing, int) or isinstance(fencing, bool) or not isinstance(ci_url, str):
            raise ValueError("`fencing` or `ci_url` of the wrong type")
        fields = {name: doc[name] for name in kinds}
        return cls(**fields, created=float(created), fencing=fencing, ci_url=ci_url)
