"""Every command answers --help, with examples."""

from __future__ import annotations

from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from reconciler.cli import app

ROOT = get_command(app)


def leaves(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Typer vendors its own click, so groups are told apart by having commands."""
    if hasattr(group, "commands"):
        out = []
        for name, sub in group.commands.items():
            out += leaves(sub, (*prefix, name))
        return out
    return [prefix]


COMMANDS = leaves(ROOT)


def test_the_commands_of_the_design_exist() -> None:
    names = {" ".join(c) for c in COMMANDS}
    for wanted in (
        "validate",
        "plan",
        "apply",
        "down",
        "status",
        "watch",
        "ledger",
        "pin",
        "unpin",
        "state list",
        "state show",
        "state force-unlock",
        "state migrate",
        "report",
    ):
        assert wanted in names


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_help_has_examples(argv: tuple[str, ...]) -> None:
    outcome = CliRunner().invoke(app, [*argv, "--help"])
    assert outcome.exit_code == 0
    assert "Examples:" in outcome.stdout
    assert f"ray-vast {' '.join(argv)}" in outcome.stdout
