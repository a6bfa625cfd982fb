"""The house stays in rooms (issue 22): the limits the split reached, held by the suite.

A module that passes its limit is split along its seams before more is added to it
(../shared/reference/house-audit.md shows the seams), so the limits are checked here rather than
remembered: no module of `reconciler/` or `agent/` over 500 lines, the watch controller at most
350 (construction, specs and the two phases of a tick), and no function over 60 lines (from its
`def` to its last line; nested functions count on their own).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reconciler", "agent")
MODULE_LINES = 500
CONTROLLER_LINES = 350
FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_its_limit() -> None:
    over = {str(p.relative_to(ROOT)): n for p in _modules() if (n := _lines(p)) > MODULE_LINES}
    assert over == {}


def test_the_controller_keeps_to_its_two_phases() -> None:
    assert _lines(ROOT / "reconciler/watch/controller.py") <= CONTROLLER_LINES


def test_no_function_is_over_its_limit() -> None:
    over = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    over[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = length
    assert over == {}


def test_each_package_says_what_it_holds_and_what_it_may_import() -> None:
    """Each package's `__init__.py` docstring is its room's sign: what it holds, and which
    layers it may import (the layering check enforces the rule; the sign says it to a reader)."""
    unsigned = []
    for init in sorted(p for package in PACKAGES for p in (ROOT / package).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc.splitlines()) < 3 or "import" not in doc.lower():
            unsigned.append(str(init.relative_to(ROOT)))
    assert unsigned == []
