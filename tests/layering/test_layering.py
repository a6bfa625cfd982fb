"""The layering rules hold for the repository, and the check really catches a breach."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layering.layers import check_file, check_tree

ROOT = Path(__file__).resolve().parents[2]


def test_repository_respects_the_layers() -> None:
    assert [str(v) for v in check_tree(ROOT)] == []


@pytest.mark.parametrize(
    ("file", "line", "rule"),
    [
        ("reconciler/model/spec.py", "import httpx", "pure core imports I/O module 'httpx'"),
        ("reconciler/model/spec.py", "import socket", "pure core imports I/O module 'socket'"),
        (
            "reconciler/planning/__init__.py",
            "from reconciler.vast import client",
            "pure core imports",
        ),
        ("reconciler/nets/__init__.py", "import time", "pure core imports I/O module 'time'"),
        # Ray is allowed in exactly one planning module, and only imported inside a function:
        (
            "reconciler/planning/scaling.py",
            "def f():\n    import ray",
            "pure core imports I/O module 'ray'",
        ),
        (
            "reconciler/planning/plan.py",
            "def f():\n    from ray.autoscaler.v2 import scheduler",
            "pure core imports I/O module 'ray.autoscaler.v2'",
        ),
        (
            "reconciler/model/demand.py",
            "def f():\n    import ray",
            "pure core imports I/O module 'ray'",
        ),
        ("reconciler/planning/raypacking.py", "import ray", "pure core imports I/O module 'ray'"),
        (
            "reconciler/planning/raypacking.py",
            "def g():\n    import os",
            "pure core imports I/O module 'os'",
        ),
        ("reconciler/nets/__init__.py", "x = open('f')", "pure core calls open()"),
        (
            "reconciler/model/spec.py",
            "import datetime\nx = datetime.datetime.now()",
            "reads the clock",
        ),
        ("reconciler/spec/loader.py", "import httpx", "only reconciler/vast may import httpx"),
        ("reconciler/cli/__init__.py", "import agent", "reconciler imports 'agent'"),
        ("agent/__init__.py", "import reconciler", "agent imports 'reconciler'"),
        ("agent/__init__.py", "import yaml", "agent imports non-standard-library module 'yaml'"),
        ("vastsim/__init__.py", "from reconciler import cli", "vastsim imports 'reconciler'"),
        (
            "reconciler/operations.py",
            "def f(provider):\n    provider.destroy_instance(7)",
            "destroy_instance() changes vast outside reconciler/applying",
        ),
        (
            "reconciler/head/app.py",
            "def f(client):\n    client.stop_instance(7)",
            "stop_instance() changes vast outside reconciler/applying",
        ),
        (
            "reconciler/watch/controller.py",
            "def f(p):\n    getattr(p, 'create_instance')(1, None)",
            "create_instance() changes vast outside reconciler/applying",
        ),
        # issue 22: the packing is the planner's; alerts are built in one place and typed
        (
            "reconciler/watch/raydemand.py",
            "from reconciler.planning import raypacking",
            "only reconciler/planning imports the Ray packing",
        ),
        (
            "reconciler/watch/rayreaders.py",
            "from reconciler.planning.raypacking import pack",
            "only reconciler/planning imports the Ray packing",
        ),
        (
            "reconciler/head/app.py",
            "def f(now):\n    return Alert(now, 'c', 'x', 'y')",
            "an Alert is built outside planning/alerts.py",
        ),
        (
            "reconciler/planning/draft.py",
            "def f(now):\n    return Alert(now, 'c', 'x', 'y')",
            "an Alert is built outside planning/alerts.py",
        ),
        (
            "reconciler/watch/controller.py",
            "def f(plan):\n    return [n for n in plan.notes if n.startswith('ALERT')]",
            "an alert found by a string prefix",
        ),
        (
            "reconciler/head/enrollment.py",
            "def f(record):\n    return replace(record, phase=Phase.ENROLLED)",
            "a record's phase set by hand",
        ),
        (
            "reconciler/planning/lifecycle.py",
            "def f(draft, record):\n    draft.update(record, intent=Intent.RUNNING)",
            "a record's intent set by hand",
        ),
    ],
)
def test_a_forbidden_import_is_caught(tmp_path: Path, file: str, line: str, rule: str) -> None:
    """The file as it is passes; with the breach added it is caught. (The rules are per file, so
    the file alone is checked where it sits in the tree, not a copy of the whole tree.)"""
    target = tmp_path / file
    target.parent.mkdir(parents=True, exist_ok=True)
    original = (ROOT / file).read_text()
    target.write_text(original)
    assert [str(v) for v in check_file(tmp_path, target)] == []
    target.write_text(original + "\n" + line + "\n")
    violations = [str(v) for v in check_file(tmp_path, target)]
    assert any(file in v and rule in v for v in violations), violations
