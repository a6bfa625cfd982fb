"""The agent as the head serves it: one deterministic zip of the `agent` package, and its hash.

`reconciler` never imports `agent` (they share only the HTTP protocol), so the files are found on
disk: where the import system would find the `agent` package (`importlib.util.find_spec`, which
locates a top-level package without running it), else beside `reconciler` in the repository. The
zip is built the same way every time (sorted names, fixed timestamps and modes, no compression),
so its sha256 depends on the sources alone: the launcher puts that hash in every container's
environment and the bootloader refuses anything else. The bootloader's own source is what the
launcher puts on the container's command line.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

BOOTLOADER = "bootloader.py"
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class AgentBundle:
    data: bytes
    sha256: str
    bootloader: str

    @classmethod
    def load(cls, directory: Path | None = None) -> AgentBundle:
        where = directory if directory is not None else agent_dir()
        data = build_zip(where)
        bootloader = (where / BOOTLOADER).read_text()
        return cls(data, hashlib.sha256(data).hexdigest(), bootloader)


def agent_dir() -> Path:
    spec = importlib.util.find_spec("agent")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / "agent"


def build_zip(directory: Path) -> bytes:
    """`agent/*.py` as a zip whose bytes depend only on the files' names and contents."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as bundle:
        for path in sorted(directory.glob("*.py")):
            info = zipfile.ZipInfo(f"agent/{path.name}", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            bundle.writestr(info, path.read_bytes())
    return buffer.getvalue()
