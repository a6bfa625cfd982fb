"""The corpus of invalid specs: each must produce exactly the diagnostics its markers announce.

A case is a YAML file (or a directory of them) under `invalid/`. A line ending in
`# <- FRAGMENT @ PATH` says: an error is reported on this line whose message contains FRAGMENT,
at JSON path PATH (`@ PATH` is optional). Every error reported must be announced by a marker, so a
case also fails when the loader says more than it should.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.model.diagnostics import Diagnostic
from reconciler.spec.loader import load, spec_files

CORPUS = Path(__file__).parent / "invalid"
MARKER = re.compile(r"#\s*<-\s*(?P<fragment>.+?)(?:\s+@\s+(?P<path>\S+))?\s*$")


@dataclass(frozen=True)
class Expected:
    file: str
    line: int
    fragment: str
    path: str | None


def expectations(case: Path) -> list[Expected]:
    found = []
    for file in spec_files(case):
        for number, text in enumerate(file.read_text().splitlines(), start=1):
            match = MARKER.search(text)
            if match:
                found.append(Expected(str(file), number, match["fragment"], match["path"]))
    return found


def matches(diagnostic: Diagnostic, expected: Expected) -> bool:
    loc = diagnostic.location
    if loc is None or loc.file != expected.file or loc.line != expected.line:
        return False
    if expected.path is not None and loc.path != expected.path:
        return False
    return expected.fragment in f"{diagnostic.summary} {diagnostic.detail}"


CASES = sorted(CORPUS.iterdir())


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_invalid_spec(case: Path) -> None:
    expected = expectations(case)
    assert expected, f"{case} has no `# <-` marker"
    result = load(case)
    errors = result.diagnostics.errors()
    assert not result.ok and result.clusters == ()
    described = "\n".join(f"  {d.location}: {d.summary}" for d in errors)
    for want in expected:
        assert any(matches(d, want) for d in errors), f"missing {want}\ngot:\n{described}"
    for got in errors:
        assert any(matches(got, want) for want in expected), f"unexpected:\n{described}"
