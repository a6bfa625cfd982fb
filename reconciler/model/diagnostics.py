"""Problems and remarks, collected rather than raised: of user input, and of a plan.

A run reports every problem it finds at once, each pointing at a file, line, column and JSON path,
the way Terraform's diagnostics do: a user fixing a spec should not have to rerun the tool once per
mistake. A plan says what it could not do, what it left alone and why in the same values (its
errors, warnings and notes), each with a `code` that code reads and a `text` that people read; no
caller picks a diagnostic out by the words it starts with. Nothing here does I/O; the views render
diagnostics for people and for machines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Location:
    """A place in a YAML file; line and column count from 1, like editors do."""

    file: str
    line: int
    column: int
    path: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        return f"{where} ({self.path})" if self.path else where


@dataclass(frozen=True)
class Diagnostic:
    """One problem or remark: a short summary, an optional detail, where it is (a place in a file,
    or the cluster/node type it is about), and the code of its kind."""

    severity: Severity
    summary: str
    location: Location | None = None
    detail: str = ""
    code: str = ""
    subject: str = ""

    @property
    def text(self) -> str:
        """The line people read: the subject it is about, then the summary."""
        return f"{self.subject}: {self.summary}" if self.subject else self.summary

    def to_json(self) -> dict[str, object]:
        loc = self.location
        return {
            "severity": self.severity,
            "code": self.code,
            "subject": self.subject,
            "summary": self.summary,
            "detail": self.detail,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "path": loc.path if loc else None,
        }


def plan_error(code: str, summary: str, subject: str = "") -> Diagnostic:
    """What stopped a plan from being made (nothing is planned)."""
    return Diagnostic("error", summary, code=code, subject=subject)


def plan_warning(code: str, summary: str, subject: str = "") -> Diagnostic:
    """What a plan leaves alone that a person should look at."""
    return Diagnostic("warning", summary, code=code, subject=subject)


def plan_note(code: str, summary: str, subject: str = "") -> Diagnostic:
    """What a plan did not do, and why, or what it noticed on the way."""
    return Diagnostic("note", summary, code=code, subject=subject)


@dataclass
class Diagnostics:
    """An ordered collection of diagnostics."""

    items: list[Diagnostic] = field(default_factory=list)

    def error(self, summary: str, location: Location | None = None, detail: str = "") -> None:
        self.items.append(Diagnostic("error", summary, location, detail))

    def warning(self, summary: str, location: Location | None = None, detail: str = "") -> None:
        self.items.append(Diagnostic("warning", summary, location, detail))

    def extend(self, other: Diagnostics) -> None:
        self.items.extend(other.items)

    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    def __iter__(self) -> Iterator[Diagnostic]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)
