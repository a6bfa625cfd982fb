"""A plan's errors, warnings and notes are typed values: code reads their `code`, people their
`text`, and a saved plan keeps them whole (no caller picks one out by the words it starts with)."""

from __future__ import annotations

import re

import pytest

from reconciler.model.codec import decode, encode
from reconciler.model.plan import Plan
from tests.planning.test_plan_table import CASES, run

CODE = re.compile(r"^[a-z][a-z_]*$")


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_diagnostic_of_a_plan_has_a_code_and_one_severity(name: str) -> None:
    plan = run(CASES[name]())
    for diagnostic in plan.diagnostics:
        assert CODE.match(diagnostic.code), diagnostic
        assert diagnostic.text.endswith(diagnostic.summary)
    parts = (*plan.errors, *plan.warnings, *plan.notes)
    assert sorted(parts, key=id) == sorted(plan.diagnostics, key=id)


def test_the_book_raises_each_kind_of_diagnostic() -> None:
    """The cases cover an error, a warning and a note, so the test above checks all three."""
    seen = {d.severity for name in CASES for d in run(CASES[name]()).diagnostics}
    assert seen == {"error", "warning", "note"}


@pytest.mark.parametrize("name", ["failed_listing", "orphan_and_foreign", "cap"])
def test_a_saved_plan_keeps_its_diagnostics_typed(name: str) -> None:
    plan = run(CASES[name]()).plan
    again = decode(Plan, encode(plan))
    assert again.diagnostics == plan.diagnostics and again.diagnostics
