"""The state file's format version, and the explicit steps that bring an old file up to date.

Each step is a function `upgrade_vN_to_vM(doc) -> doc` that knows exactly one old layout, the way
Terraform's `statefile/version*_upgrade.go` does. Reading runs the chain from the file's version to
the current one; a file from a newer ray-vast is refused, never guessed at: misreading the state
would make the reconciler forget instances it pays for. Steps take and return plain JSON documents
(the whole file, records included), so a future step may also reshape the records payload.

Version 0 is the pre-release layout (`tool_version` and `resources` instead of `ray_vast_version`
and `records`); it exists so the chain and its golden fixtures are exercised from day one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reconciler.state.errors import StateCorruptError, StateTooNewError

CURRENT_VERSION = 1

Document = dict[str, Any]


def upgrade_v0_to_v1(doc: Document) -> Document:
    """v0 named the tool version `tool_version` and the payload `resources`."""
    upgraded = {k: v for k, v in doc.items() if k not in ("tool_version", "resources")}
    upgraded["version"] = 1
    upgraded["ray_vast_version"] = doc.get("tool_version", "unknown")
    upgraded["records"] = doc.get("resources", {})
    return upgraded


# UPGRADES[n] turns a version-n document into a version-(n+1) one.
UPGRADES: dict[int, Callable[[Document], Document]] = {0: upgrade_v0_to_v1}


def format_version(doc: Document, source: str) -> int:
    """The `version` of a parsed state document, checked to be a non-negative integer."""
    version = doc.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise StateCorruptError(
            f"{source}: `version` must be a non-negative integer, got {version!r}"
        )
    return version


def upgrade(doc: Document, source: str) -> Document:
    """Bring `doc` to `CURRENT_VERSION`, or refuse a version this ray-vast does not know."""
    version = format_version(doc, source)
    if version > CURRENT_VERSION:
        raise StateTooNewError(
            f"{source} has state format version {version}, but this ray-vast understands"
            f" versions up to {CURRENT_VERSION}. It may have been created by a newer version of"
            f" ray-vast (it says {doc.get('ray_vast_version', 'unknown')!r}); upgrade ray-vast to"
            " use it. The file was not changed."
        )
    while version < CURRENT_VERSION:
        doc = UPGRADES[version](doc)
        upgraded = format_version(doc, source)
        if upgraded != version + 1:
            raise AssertionError(f"upgrade from v{version} produced v{upgraded}")
        version = upgraded
    return doc
