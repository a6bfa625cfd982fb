"""Golden renderings of plans: what a person and a CI job see for a few fixed situations.

Regenerate after a deliberate change with `RAY_VAST_UPDATE_GOLDEN=1 pytest tests/views`, then read
the diff before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.views.plan import as_json, human
from tests.planning.test_plan_table import CASES, run

GOLDEN = Path(__file__).parent / "golden"
SITUATIONS = [
    "scale_up",
    "cap",
    "exited",
    "orphan_and_foreign",
    "enrollment_within_limit",
    "failed_listing",
    "breaker_trips",
]


def compare(path: Path, text: str) -> None:
    if os.environ.get("RAY_VAST_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with RAY_VAST_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("name", SITUATIONS)
def test_human_plan(name: str) -> None:
    compare(GOLDEN / f"{name}.txt", human(run(CASES[name]())))


@pytest.mark.parametrize("name", SITUATIONS)
def test_json_plan(name: str) -> None:
    text = json.dumps(as_json(run(CASES[name]())), indent=2, sort_keys=True) + "\n"
    compare(GOLDEN / f"{name}.json", text)


def test_json_plan_is_versioned_and_has_no_records() -> None:
    payload = as_json(run(CASES["scale_up"]()))
    assert payload["format_version"] == "1.0"
    assert "records" not in payload
    assert payload["summary"] == {"rent": 2}
