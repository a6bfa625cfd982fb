"""The layering rules of DESIGN.md section 2, checked by reading imports with `ast`.

- `reconciler/model`, `reconciler/planning`, `reconciler/nets` are the pure core: no I/O modules,
  no third-party clients, no other reconciler layer that does I/O, and no reading of the clock.
  One exemption: `reconciler/planning/raypacking.py` may import `ray`, inside a function only.
  It hands the packing decision to Ray's own autoscaler scheduler (`ResourceDemandScheduler`,
  a pure computation: DESIGN.md 10, "Ray demand is Ray's"); importing it lazily keeps Ray out of
  every import of the planner. Any other I/O module there, `ray` at its module level, or `ray` in
  any other module of the core is still a breach.
- Inside `reconciler`, only `reconciler/vast` imports httpx.
- `agent` and `reconciler` never import each other; `vastsim` imports neither.
- `agent` imports only the standard library (it runs inside the user's image).
- Only `reconciler/applying` (the one executor) calls what changes anything at vast: the vast
  client's create, destroy, stop, start, label and reboot (`reconciler/vast` defines them).
- Only `reconciler/planning` imports the Ray packing (`planning.raypacking`, Ray's scheduler):
  how demand packs onto node types is a planning decision, never a reader's (issue 22).
- Only `reconciler/planning/alerts.py` builds an `Alert` (one builder, one repeat window), and
  nothing finds an alert by a string prefix (`.startswith("ALERT")`): alerts are typed values.
- Outside `reconciler/model`, no phase or intent of a record is set by hand (`phase=` or
  `intent=` given to `evolve`, `replace`, `update` or `_change`): each move is a transition of the
  record's (`InstanceRecord.rented`, `enrolled`, `doomed`... and model/stopping.py), written once
  (issue 22). The listing's reading of a status (`planning/refresh.py`) is the one exemption.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PURE = ("reconciler/model", "reconciler/planning", "reconciler/nets")
IO_MODULES = frozenset(
    {
        "asyncio",
        "http",
        "httpx",
        "io",
        "jsonschema",
        "os",
        "pathlib",
        "random",
        "ray",
        "requests",
        "secrets",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "sqlite3",
        "ssl",
        "subprocess",
        "tempfile",
        "tenacity",
        "threading",
        "time",
        "typer",
        "urllib",
        "yaml",
        "cryptography",
        "rich",
        "logging",
    }
)
IMPURE_LAYERS = (
    "reconciler.applying",
    "reconciler.cli",
    "reconciler.head",
    "reconciler.spec",
    "reconciler.state",
    "reconciler.vast",
    "reconciler.views",
    "reconciler.watch",
    "reconciler.clock",
)
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "monotonic", "perf_counter"})
IMPURE_BUILTINS = frozenset({"open", "print", "input"})
# The vast client's calls that change something at vast: only the executor makes them.
MUTATING_CALLS = frozenset(
    {
        "create_instance",
        "destroy_instance",
        "destroy_instances",
        "stop_instance",
        "start_instance",
        "label_instance",
        "reboot_instance",
    }
)
APPLIER = "reconciler/applying/"
# The one module of the pure core that may import Ray, lazily (see the docstring).
RAY_EXEMPT = "reconciler/planning/raypacking.py"
PACKING = "reconciler.planning.raypacking"
PLANNING = "reconciler/planning/"
ALERTS = "reconciler/planning/alerts.py"
TRANSITIONS_EXEMPT = ("reconciler/model/", "reconciler/planning/refresh.py")
COPIES = frozenset({"evolve", "replace", "update", "_change"})


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}"


def imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def check_file(root: Path, path: Path) -> list[Violation]:
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    found: list[Violation] = []

    def flag(line: int, rule: str) -> None:
        found.append(Violation(rel, line, rule))

    pure = rel.startswith(PURE)
    lazy = _lazy_import_lines(tree) if rel == RAY_EXEMPT else set()
    for line, name in imports(tree):
        if pure and _top(name) == "ray" and line in lazy:
            pass  # the exemption: Ray's scheduler, imported when a packing is asked for
        elif pure and _top(name) in IO_MODULES:
            flag(line, f"pure core imports I/O module {name!r}")
        if pure and any(_within(name, layer) for layer in IMPURE_LAYERS):
            flag(line, f"pure core imports {name!r}")
        if (
            rel.startswith("reconciler/")
            and _top(name) == "httpx"
            and not rel.startswith("reconciler/vast/")
        ):
            flag(line, "only reconciler/vast may import httpx")
        if rel.startswith("reconciler/") and _top(name) in ("agent", "vastsim"):
            flag(line, f"reconciler imports {name!r}")
        if rel.startswith("agent/") and _top(name) in ("reconciler", "vastsim"):
            flag(line, f"agent imports {name!r}")
        if rel.startswith("agent/") and _top(name) not in sys.stdlib_module_names | {"agent"}:
            flag(line, f"agent imports non-standard-library module {name!r}")
        if rel.startswith("vastsim/") and _top(name) in ("reconciler", "agent"):
            flag(line, f"vastsim imports {name!r}")
        if _within(name, PACKING) and not rel.startswith(PLANNING):
            flag(line, "only reconciler/planning imports the Ray packing")
    if rel.startswith("reconciler/"):
        found += _alert_breaches(rel, tree)
    if pure:
        found += _impure_calls(rel, tree)
    if rel.startswith("reconciler/") and not rel.startswith(TRANSITIONS_EXEMPT):
        found += _hand_transitions(rel, tree)
    if rel.startswith("reconciler/") and not rel.startswith((APPLIER, "reconciler/vast/")):
        found += _mutating_calls(rel, tree)
    return found


def _lazy_import_lines(tree: ast.AST) -> set[int]:
    """Lines of the imports made inside a function body."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    lines.add(inner.lineno)
    return lines


def _mutating_calls(rel: str, tree: ast.AST) -> list[Violation]:
    """`x.destroy_instance(...)`, or the name handed to `getattr`, outside the applier."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        named = func.attr if isinstance(func, ast.Attribute) else None
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            arg = node.args[1]
            named = arg.value if isinstance(arg, ast.Constant) else None
        if named in MUTATING_CALLS:
            found.append(
                Violation(rel, node.lineno, f"{named}() changes vast outside reconciler/applying")
            )
    return found


def _calls(tree: ast.AST) -> Iterator[tuple[ast.Call, str | None]]:
    """Every call in `tree`, with the name it calls (`f(...)` or `x.f(...)`: "f")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else None
            yield node, func.attr if isinstance(func, ast.Attribute) else name


def _alert_breaches(rel: str, tree: ast.AST) -> list[Violation]:
    """`Alert(...)` built outside planning/alerts.py, or `x.startswith("ALERT...")` anywhere."""
    found = []
    for node, name in _calls(tree):
        if name == "Alert" and rel != ALERTS:
            found.append(
                Violation(rel, node.lineno, "an Alert is built outside planning/alerts.py")
            )
        prefix = node.args[0] if node.args else None
        if (
            name == "startswith"
            and isinstance(prefix, ast.Constant)
            and isinstance(prefix.value, str)
            and prefix.value.upper().startswith("ALERT")
        ):
            found.append(Violation(rel, node.lineno, "an alert found by a string prefix"))
    return found


def _hand_transitions(rel: str, tree: ast.AST) -> list[Violation]:
    """`evolve(record, phase=...)` and the like: a phase or intent moved by hand."""
    found = []
    for node, name in _calls(tree):
        if name not in COPIES:
            continue
        for keyword in node.keywords:
            if keyword.arg in ("phase", "intent"):
                found.append(Violation(rel, node.lineno, f"a record's {keyword.arg} set by hand"))
    return found


def _impure_calls(rel: str, tree: ast.AST) -> list[Violation]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IMPURE_BUILTINS:
            found.append(Violation(rel, node.lineno, f"pure core calls {func.id}()"))
        if isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS:
            found.append(Violation(rel, node.lineno, f"pure core reads the clock ({func.attr}())"))
    return found


def check_tree(root: Path) -> list[Violation]:
    found: list[Violation] = []
    for package in ("reconciler", "agent", "vastsim"):
        for path in sorted((root / package).rglob("*.py")):
            found += check_file(root, path)
    return found


if __name__ == "__main__":
    problems = check_tree(Path(__file__).resolve().parents[2])
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)
