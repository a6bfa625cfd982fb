"""The image's Ray and Python: what the interpreter that will run Ray has (standard library only).

Ray refuses a worker node whose Ray version, or Python version, differs from the head's (Ray
2.60's `check_version_info`: the Ray version exactly, Python to the patch level unless
`RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor` is set in the node's environment). So the agent
tells the head, when it enrolls, which ones this image would run: the head refuses a mismatch with
the reason in plain words instead of letting `ray start` fail on every host it rents.

Which interpreter: the agent itself may run on another Python than Ray (the bootloader runs it
with the image's `python3 -I -S`), so it asks the one `ray` would run on. `RV_RAY_COMMAND`'s
program when it is a Python (`python3 -m ...`, `/usr/bin/python3 fake_ray.py`); otherwise the
`ray` found on the container's PATH, whose script names its interpreter on its first line
(`#!/opt/conda/bin/python3.10`, `#!/usr/bin/env python3`, or pip's `#!/bin/sh` + `'''exec'
"/long path/python" "$0" "$@"` for long paths). That interpreter then prints its
`sys.version_info` and Ray's version from Ray's package metadata (`importlib.metadata`), which is
far faster than importing Ray; only an install without metadata is imported (`ray.__version__`).

`probe` never raises: what cannot be told is None, and `source` says why (the head admits a
candidate whose versions are unknown, and Ray decides).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

MATCH_LEVEL_ENV = "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"
PROBE_TIMEOUT = 30.0  # a cold interpreter on a slow disk; once per boot, before enrolling
HIDDEN = ("CONTAINER_API_KEY", "RV_JOIN_TOKEN", "RV_CA_PEM")  # as agent.raynode hides from Ray
_PYTHON_NAME = re.compile(r"^python[0-9.]*$")
_SH_EXEC = re.compile(r"""^'''exec' (?:"([^"]+)"|(\S+))""")

PROBE = """
import json, sys
ray, how = None, "no Ray package in this Python"
try:
    from importlib import metadata
    ray, how = metadata.version("ray"), "Ray's package metadata"
except Exception:
    try:
        import ray as _ray
        ray, how = str(_ray.__version__), "ray.__version__"
    except Exception:
        pass
print(json.dumps({"python": "%d.%d.%d" % tuple(sys.version_info[:3]), "ray": ray, "how": how}))
"""


def probe(command: Sequence[str], env: Mapping[str, str]) -> dict[str, Any]:
    """The `runtime` of the enrollment request: `ray_version` and `python_version` of the Python
    that `command` (the `ray` to start) runs on, the match level Ray will compare Python at,
    that interpreter, and how it was found."""
    level = env.get(MATCH_LEVEL_ENV) or None
    found: dict[str, Any] = {"ray_version": None, "python_version": None}
    if level is not None:
        found["python_version_match_level"] = level[:32]
    python, how = interpreter(command, env)
    if python is None:
        found["source"] = how[:400]
        return found
    found["python"] = python[:400]
    clean = {k: v for k, v in env.items() if k not in HIDDEN}
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            env=clean,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        found["source"] = f"{how}; asking it failed: {exc}"[:400]
        return found
    if isinstance(answer.get("python"), str):
        found["python_version"] = answer["python"]
    if isinstance(answer.get("ray"), str):
        found["ray_version"] = answer["ray"][:64]
    found["source"] = f"{how}; Ray from {answer.get('how')}"[:400]
    return found


def interpreter(command: Sequence[str], env: Mapping[str, str]) -> tuple[str | None, str]:
    """The Python that `command` runs on, and how that was found (None: not found, and why)."""
    if not command:
        return None, "no Ray command"
    program = command[0]
    search = env.get("PATH", os.defpath)
    if _PYTHON_NAME.match(os.path.basename(program)):
        path = shutil.which(program, path=search)
        if path is None:
            return None, f"{program} is not on PATH"
        return path, f"the Ray command runs {program}"
    path = shutil.which(program, path=search)
    if path is None:
        return None, f"{program} is not on PATH"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace").splitlines()
    except OSError as exc:
        return None, f"cannot read {path}: {exc}"
    named = shebang(head)
    if named is None:
        return None, f"{path} names no Python on its first line"
    if os.path.isabs(named):
        return named, f"{path} runs {named}"
    resolved = shutil.which(named, path=search)
    if resolved is None:
        return None, f"{path} runs {named}, which is not on PATH"
    return resolved, f"{path} runs {named} ({resolved})"


def shebang(lines: Sequence[str]) -> str | None:
    """The Python a script's first lines name (`#!/usr/bin/python3`, `#!/usr/bin/env python3`,
    pip's `#!/bin/sh` with `'''exec' "<python>" "$0" "$@"`), or None."""
    if not lines or not lines[0].startswith("#!"):
        return None
    try:
        words = shlex.split(lines[0][2:])
    except ValueError:
        return None
    if not words:
        return None
    if os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    elif os.path.basename(words[0]) == "sh" and len(lines) > 1:
        found = _SH_EXEC.match(lines[1])
        if found:
            words = [found.group(1) or found.group(2)]
    if words and _PYTHON_NAME.match(os.path.basename(words[0])):
        return words[0]
    return None
