"""The identity a deliberate stop keeps on the container's disk (standard library only).

When the head answers the report of a TERM with "deliberate stop" (DESIGN.md 10), the agent
keeps its enrollment answer (the client certificate and its key, the CA, the heartbeat URL, the
record and slot) in one file on the container's own disk, which a stopped vast instance keeps:

    $RV_STATE_DIR/identity.json       when set (tests)
    $DATA_DIRECTORY/.ray-vast/...     vast's (and vastsim's) data directory, when set
    $HOME/.ray-vast/...               else

The directory is 0700 and the file 0600, written to a temporary name and renamed, so a boot
never finds half an identity. The next boot of the container finds it and resumes with it
(`agent.lifecycle`'s resuming phase) instead of enrolling; once the head has taken the resume
the file is removed, so an unexpected restart later enrolls and is refused as a second
enrollment. An identity of another instance (a copied disk) is not taken.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any

FILE = "identity.json"
VERSION = 1


def directory(env: Mapping[str, str]) -> str:
    """Where the identity is kept in this container."""
    given = env.get("RV_STATE_DIR", "").strip()
    if given:
        return given
    base = env.get("DATA_DIRECTORY", "").strip() or env.get("HOME", "").strip() or "/root"
    return os.path.join(base, ".ray-vast")


def path(env: Mapping[str, str]) -> str:
    return os.path.join(directory(env), FILE)


def save(env: Mapping[str, str], instance_id: int, identity: Mapping[str, Any]) -> None:
    """Keep `identity` for the next boot of instance `instance_id` (raises OSError)."""
    where = directory(env)
    os.makedirs(where, mode=0o700, exist_ok=True)
    os.chmod(where, 0o700)
    doc = {"version": VERSION, "instance_id": instance_id, "identity": dict(identity)}
    temporary = os.path.join(where, f".{FILE}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, os.path.join(where, FILE))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def load(env: Mapping[str, str], instance_id: int) -> tuple[dict[str, Any] | None, str]:
    """(the saved identity of this instance or None, what was found, for the log)."""
    where = path(env)
    try:
        with open(where, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        return None, "no saved identity"
    except (OSError, ValueError) as exc:
        return None, f"a saved identity at {where} that cannot be read ({exc}): enrolling"
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return None, f"a saved identity at {where} of another format: enrolling"
    if doc.get("instance_id") != instance_id:
        return None, f"a saved identity of instance {doc.get('instance_id')}, not this one"
    identity = doc.get("identity")
    if not isinstance(identity, dict):
        return None, f"a saved identity at {where} without its contents: enrolling"
    return identity, f"a saved identity at {where}"


def forget(env: Mapping[str, str]) -> None:
    """Remove the saved identity (nothing there is fine)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path(env))
