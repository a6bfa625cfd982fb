"""The few GitHub Actions expressions the pipeline harness understands, and nothing more.

`${{ path }}` (a context path such as `secrets.X`, `vars.X`, `github.sha`,
`github.event.pull_request.number`, `steps.ID.outputs.NAME`, `env.X`, or a quoted literal,
optionally `a || b` for a default) is substituted, and an `if:` is read as `&&`/`||` over terms of
the forms `A == 'x'`, `A != 'x'`, `always()`, `success()`, `failure()`, `cancelled()`, a bare path
(truthy when non-empty) and `!term`. Anything else (parentheses, functions such as `format`,
numbers) raises `Unsupported`, so a template that starts to need more fails its test loudly
instead of being read wrongly. Comparisons ignore case, as GitHub's do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}", re.DOTALL)
PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_*-]+)*$")
LITERAL = re.compile(r"^'((?:[^']|'')*)'$")
STATUS_FUNCTIONS = ("always()", "success()", "failure()", "cancelled()")


class Unsupported(ValueError):
    """An expression outside the small subset this harness evaluates."""


@dataclass
class Contexts:
    """What an expression can name: GitHub's contexts for one step (or one job's `if:`)."""

    github: Mapping[str, Any]
    secrets: Mapping[str, str] = field(default_factory=dict)
    vars: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    steps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    runner: Mapping[str, str] = field(default_factory=lambda: {"os": "Linux", "arch": "X64"})

    def lookup(self, path: str) -> str:
        """The value of a context path as a string ('' when absent, as GitHub gives)."""
        head, _, rest = path.partition(".")
        if head in ("secrets", "vars", "env", "runner"):
            value: Any = getattr(self, head).get(rest, "")
        elif head == "github":
            value = dig(self.github, rest)
        elif head == "steps":
            step_id, _, tail = rest.partition(".")
            if not tail.startswith("outputs."):
                raise Unsupported(f"only steps.<id>.outputs.<name> is known: {path}")
            value = self.steps.get(step_id, {}).get(tail.removeprefix("outputs."), "")
        else:
            raise Unsupported(f"unknown context {head!r} in {path!r}")
        return text(value)


def dig(tree: Mapping[str, Any], dotted: str) -> Any:
    """Follow `a.b.c` through nested mappings; '' where a key is missing."""
    node: Any = tree
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return ""
        node = node[key]
    return node


def text(value: Any) -> str:
    """An expression value as GitHub prints it: booleans lower case, None empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def value_of(term: str, contexts: Contexts) -> str:
    """A literal or a context path; `a || b` gives the first non-empty one."""
    for alternative in term.split("||"):
        operand = alternative.strip()
        literal = LITERAL.match(operand)
        if literal:
            value = literal.group(1).replace("''", "'")
        elif operand in ("true", "false"):
            value = operand
        elif PATH.match(operand):
            value = contexts.lookup(operand)
        else:
            raise Unsupported(f"not a literal or a context path: {operand!r}")
        if value:
            return value
    return ""


def substitute(template: str, contexts: Contexts) -> str:
    """Every `${{ ... }}` in `template` replaced by its value."""
    return EXPRESSION.sub(lambda m: value_of(m.group(1), contexts), template)


def substitute_all(values: Mapping[str, Any] | None, contexts: Contexts) -> dict[str, str]:
    """An `env:` or `with:` mapping with its values substituted (non-strings printed first)."""
    return {str(k): substitute(text(v), contexts) for k, v in (values or {}).items()}


@dataclass(frozen=True)
class Status:
    """How the job has gone so far, for `success()`, `failure()` and `cancelled()`."""

    failed: bool = False


def condition(expression: str | bool | None, contexts: Contexts, status: Status) -> bool:
    """Whether an `if:` holds. With no status function in it, `success() &&` is implied."""
    if expression is None:
        return not status.failed
    if isinstance(expression, bool):
        return expression and not status.failed
    inner = expression.strip()
    whole = EXPRESSION.fullmatch(inner)
    if whole:
        inner = whole.group(1)
    if "(" in inner.replace("()", ""):
        raise Unsupported(f"parentheses or function arguments in if: {expression!r}")
    holds = any(
        all(term(t.strip(), contexts, status) for t in alternative.split("&&"))
        for alternative in inner.split("||")
    )
    if not any(f in inner for f in STATUS_FUNCTIONS):
        return holds and not status.failed
    return holds


def term(expression: str, contexts: Contexts, status: Status) -> bool:
    """One term of an `if:`: a comparison, a status function, a negation or a bare value."""
    if expression.startswith("!") and not expression.startswith("!="):
        return not term(expression[1:].strip(), contexts, status)
    functions: dict[str, Callable[[], bool]] = {
        "always()": lambda: True,
        "success()": lambda: not status.failed,
        "failure()": lambda: status.failed,
        "cancelled()": lambda: False,
    }
    if expression in functions:
        return functions[expression]()
    for operator in ("==", "!="):
        if operator in expression:
            left, right = (value_of(side.strip(), contexts) for side in expression.split(operator))
            equal = left.casefold() == right.casefold()
            return equal if operator == "==" else not equal
    value = value_of(expression, contexts)
    return value not in ("", "false", "0")
