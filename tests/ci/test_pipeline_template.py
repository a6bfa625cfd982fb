"""The pipeline template users copy: valid YAML that runs real ray-vast commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from typer.main import get_command

from reconciler.cli import app

TEMPLATE = Path(__file__).parents[2] / "ci" / "github" / "ray-vast.yml"


def commands() -> list[list[str]]:
    workflow = yaml.safe_load(TEMPLATE.read_text())
    found = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                if line.strip().startswith("ray-vast "):
                    found.append(shlex.split(line.split(">")[0]))
    return found


def test_plans_on_pull_requests_and_applies_on_main() -> None:
    workflow = yaml.safe_load(TEMPLATE.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    assert workflow["concurrency"]["cancel-in-progress"] is False
    assert "secrets.VAST_API_KEY" in workflow["env"]["VAST_API_KEY"]
    runs = [c[1] for c in commands()]
    assert runs.count("validate") == 2 and "plan" in runs and "apply" in runs


def test_every_command_and_option_exists() -> None:
    cli = get_command(app)
    for argv in commands():
        sub = cli.commands[argv[1]]  # type: ignore[attr-defined]
        known = {o for p in sub.params for o in (*p.opts, *p.secondary_opts)}
        for word in argv[2:]:
            if word.startswith("-"):
                assert word in known, f"{argv[1]} has no option {word}"


def test_apply_uses_the_saved_plan() -> None:
    applies = [c for c in commands() if c[1] == "apply"]
    assert applies and all(re.search(r"\.plan$", c[2]) for c in applies)
