"""The corpus of valid specs that `validate` warns about: each warns exactly as its markers say.

A line ending in `# <~ FRAGMENT @ PATH` says: a warning is reported on this line whose message
(summary or detail) contains FRAGMENT, at JSON path PATH. Every warning must be announced, and a
case has no error: a warning never stops a spec from loading.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reconciler.spec.loader import load, spec_files
from tests.spec.test_invalid_corpus import Expected, matches

CORPUS = Path(__file__).parent / "warnings"
MARKER = re.compile(r"#\s*<~\s*(?P<fragment>.+?)(?:\s+@\s+(?P<path>\S+))?\s*$")
CASES = sorted(CORPUS.iterdir())


def expectations(case: Path) -> list[Expected]:
    found = []
    for file in spec_files(case):
        for number, text in enumerate(file.read_text().splitlines(), start=1):
            match = MARKER.search(text)
            if match:
                found.append(Expected(str(file), number, match["fragment"], match["path"]))
    return found


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_warned_spec(case: Path) -> None:
    expected = expectations(case)
    assert expected, f"{case} has no `# <~` marker"
    result = load(case)
    assert result.ok, [f"{d.location}: {d.summary}" for d in result.diagnostics.errors()]
    warnings = [d for d in result.diagnostics if d.severity == "warning"]
    described = "\n".join(f"  {d.location}: {d.summary} / {d.detail}" for d in warnings)
    for want in expected:
        assert any(matches(d, want) for d in warnings), f"missing {want}\ngot:\n{described}"
    for got in warnings:
        assert any(matches(got, want) for want in expected), f"unexpected:\n{described}"
