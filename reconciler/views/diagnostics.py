"""Render diagnostics for people (compiler-style lines) and for machines (versioned JSON).

`file:line:column: error: summary (path)` is what editors and CI log viewers turn into links, so
that is the human form; the JSON form mirrors `terraform validate -json`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TextIO

from reconciler.model.diagnostics import Diagnostic, Diagnostics

FORMAT_VERSION = "1.0"


def human_line(diagnostic: Diagnostic) -> str:
    loc = diagnostic.location
    where = f"{loc.file}:{loc.line}:{loc.column}: " if loc else ""
    path = f" ({loc.path})" if loc and loc.path else ""
    text = f"{where}{diagnostic.severity}: {diagnostic.summary}{path}"
    if diagnostic.detail:
        text += f"\n    {diagnostic.detail}"
    return text


def write_human(diagnostics: Iterable[Diagnostic], out: TextIO) -> None:
    for diagnostic in diagnostics:
        out.write(human_line(diagnostic) + "\n")


def validate_summary(diags: Diagnostics, clusters: Sequence[str], files: Sequence[str]) -> str:
    errors = len(diags.errors())
    warnings = len(diags) - errors
    if errors:
        files_hit = len({d.location.file for d in diags.errors() if d.location})
        where = f" in {_count(files_hit, 'file')}" if files_hit else ""
        also = f", {_count(warnings, 'warning')}" if warnings else ""
        return f"Invalid: {_count(errors, 'error')}{where}{also}."
    names = ", ".join(clusters)
    return (
        f"Success! {_count(len(clusters), 'cluster')} valid in {_count(len(files), 'file')}"
        + (f": {names}" if names else "")
        + (f" ({_count(warnings, 'warning')})." if warnings else ".")
    )


def validate_json(
    diags: Diagnostics, clusters: Sequence[str], files: Sequence[str]
) -> dict[str, object]:
    errors = len(diags.errors())
    return {
        "format_version": FORMAT_VERSION,
        "valid": errors == 0,
        "error_count": errors,
        "warning_count": len(diags) - errors,
        "clusters": list(clusters),
        "files": list(files),
        "diagnostics": [d.to_json() for d in diags],
    }


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
