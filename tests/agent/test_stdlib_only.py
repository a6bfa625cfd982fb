"""The agent runs inside the user's image: it must import and run with the standard library alone.

Each check runs a fresh interpreter with `-I -S` (isolated, no site-packages at all), from the
repository and from the very zip the head serves, and lists every module the agent pulled in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.head.agentsource import AgentBundle

ROOT = Path(__file__).resolve().parents[2]
MODULES = ["bootloader", "commands", "config", "cores", "ending", "events", "gpus_sample",
           "identity", "lifecycle", "main", "messages", "raynode", "rayversion", "sampling",
           "state", "stopping", "transport", "watchdog"]  # fmt: skip

PROBE = """
import importlib, json, sys
sys.path.insert(0, {where!r})
for name in {modules!r}:
    importlib.import_module("agent." + name)
from agent import main
ours = ("agent", "__main__")
outside = sorted(
    m for m in sys.modules
    if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] not in ours
)
site = [p for p in sys.path if "site-packages" in p]
json.dump({{"outside": outside, "site": site, "file": main.__file__}}, sys.stderr)
sys.exit(main.cli(sys.argv[1:]))
"""


def isolated(where: str, *args: str) -> subprocess.CompletedProcess[str]:
    code = PROBE.format(where=where, modules=MODULES)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )


def test_every_agent_module_is_covered():
    assert sorted(p.stem for p in (ROOT / "agent").glob("*.py") if p.stem != "__init__") == MODULES


@pytest.mark.parametrize("source", ["repository", "served zip"])
def test_the_agent_imports_and_runs_with_the_standard_library_alone(source, tmp_path):
    where = str(ROOT)
    if source == "served zip":
        where = str(tmp_path / "agent.zip")
        Path(where).write_bytes(AgentBundle.load().data)
    helped = isolated(where, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--self-check" in helped.stdout
    probe = json.loads(helped.stderr)
    assert probe["outside"] == [] and probe["site"] == []
    assert probe["file"].startswith(where)

    checked = isolated(where, "--self-check")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["cpus"] >= 1 and report["settings"].startswith("incomplete")


def interpreters() -> list[str]:
    """Other Pythons on this machine that Ray 2.60 supports (the user's image may have any)."""
    found = []
    for version in ("3.9", "3.10", "3.12", "3.13"):
        pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))
        for path in [*map(str, pyenv), shutil.which(f"python{version}")]:
            if path and _runs(path):
                found.append(path)
                break
    return found


def _runs(python: str) -> bool:
    return subprocess.run([python, "-c", ""], capture_output=True, check=False).returncode == 0


@pytest.mark.parametrize("python", interpreters() or [pytest.param("", marks=pytest.mark.skip)])
def test_the_agent_runs_on_every_python_ray_supports(python: str):
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        f"for name in {MODULES!r}: importlib.import_module('agent.' + name)\n"
        "from agent import main\n"
        "sys.exit(main.cli(['--self-check']))\n"
    )
    checked = subprocess.run(
        [python, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["cpus"] >= 1
