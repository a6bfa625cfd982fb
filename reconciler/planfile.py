"""Saved plans (`ray-vast plan -out FILE`): exactly what `apply FILE` will do, or a refusal.

A plan file carries the plan (with the changes it makes to the records), the state's lineage and
serial, a fingerprint of the live instances it touches, and the digest of every cluster spec it
was made from. `apply FILE` refuses it when any of those moved on, the way Terraform refuses a
stale plan: plan and apply run in different CI jobs, and the world may change in between.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler import __version__
from reconciler.errors import RayVastError
from reconciler.model.codec import decode, encode
from reconciler.model.plan import Plan

KIND = "ray-vast-plan"
FILE_VERSION = 4  # 2: its `changes`; 3: typed diagnostics; 4: the clusters' generations


class PlanFileError(RayVastError):
    """A plan file that cannot be applied: unreadable, from another version, or stale."""


@dataclass(frozen=True)
class SavedPlan:
    plan: Plan
    spec_path: str
    spec_digests: dict[str, str]
    tool_version: str
    # The generation of each cluster the plan covers, as the records were when it was made
    # (model/generations.py): the plan is stale once one of them moves, not on every write.
    generations: dict[str, str] = field(default_factory=dict)


def dumps(saved: SavedPlan) -> bytes:
    """The plan file's bytes (a reviewed plan is stored as exactly these)."""
    payload = {
        "kind": KIND,
        "file_version": FILE_VERSION,
        "ray_vast_version": saved.tool_version,
        "spec_path": saved.spec_path,
        "spec_digests": saved.spec_digests,
        "generations": saved.generations,
        "plan": encode(saved.plan),
    }
    return json.dumps(payload, indent=2, sort_keys=True).encode() + b"\n"


def write(path: Path, saved: SavedPlan) -> None:
    """Write 0600: plans describe the account's machines and are treated as sensitive."""
    data = dumps(saved)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        raise PlanFileError(f"cannot write the plan file {path}: {exc.strerror}") from exc
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> SavedPlan:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PlanFileError(f"{path} is not a readable plan file: {exc}") from exc
    return loads(data, str(path))


def loads(data: bytes, where: str) -> SavedPlan:
    """A plan from a plan file's bytes; `where` names them in every refusal."""
    try:
        payload: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanFileError(f"{where} is not a readable plan file: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("kind") != KIND:
        raise PlanFileError(f"{where} is not a ray-vast plan file")
    if (
        payload.get("file_version") != FILE_VERSION
        or payload.get("ray_vast_version") != __version__
    ):
        raise PlanFileError(
            f"{where} was written by ray-vast {payload.get('ray_vast_version')}; plan files "
            f"cannot move between versions (this is {__version__}): plan again"
        )
    try:
        plan = decode(Plan, payload["plan"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanFileError(f"{where} holds a damaged plan: {exc}") from exc
    return SavedPlan(
        plan,
        str(payload["spec_path"]),
        dict(payload["spec_digests"]),
        __version__,
        dict(payload.get("generations") or {}),
    )


def looks_like_plan(path: Path) -> bool:
    """A file argument to `apply` is a plan file; a directory or a YAML file is specs."""
    return path.is_file() and path.suffix not in (".yaml", ".yml")
