"""Problems found in user input, collected rather than raised.

A run reports every problem it finds at once, each pointing at a file, line, column and JSON path,
the way Terraform's diagnostics do: a user fixing a spec should not have to rerun the tool once per
mistake. Nothing here does I/O; the views render diagnostics for people and for machines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]


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
    """One problem: a short summary, an optional detail, and where it is."""

    severity: Severity
    summary: str
    location: Location | None = None
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        loc = self.location
        return {
            "severity": self.severity,
            "summary": self.summary,
            "detail": self.detail,
            "file": loc.file if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "path": loc.path if loc else None,
        }


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
