"""Bad local input: a one-line error naming the path and what to do, exit 1, no traceback, and
nothing changed (issue 14). The corpus is `CASES`: each lays out a state directory (and a saved
plan) that is wrong in one way, and names the commands that must refuse it cleanly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler import __version__, planfile
from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.model.plan import Plan
from reconciler.state.filestore import FileStore
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter, ledger_path
from tests.served import LOCAL_SIM

NOW = 1_800_000_000.0
ROOT_USER = os.geteuid() == 0
# Never reached: every case must stop before calling vast.
ENV = {"VAST_URL": "http://127.0.0.1:9", "VAST_API_KEY": "k", "RAY_VAST_STATE_DIR": ""}


def _good_state(state: Path) -> bytes:
    store = FileStore(state, clock=FakeClock(NOW))
    store.lock("apply")
    store.write({"instances": {}, "requests": {}}, based_on=None)
    store.unlock()
    return (state / "state.json").read_bytes()


def _state_file(content: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def setup(state: Path) -> None:
        good = _good_state(state)
        (state / "state.json").write_bytes(content(good))

    return setup


def _envelope(**changes: object) -> Callable[[bytes], bytes]:
    def content(good: bytes) -> bytes:
        return json.dumps({**json.loads(good), **changes}).encode()

    return content


def _truncated_with_backup(state: Path) -> None:
    good = _good_state(state)
    store = FileStore(state, clock=FakeClock(NOW))
    store.lock("apply")
    store.write({"instances": {}, "requests": {}, "n": 2}, based_on=store.read())
    store.unlock()
    (state / "state.json").write_bytes(good[:10])


def _a_file(state: Path) -> None:
    state.write_bytes(b"I am a file, not a directory\n")


def _state_json_directory(state: Path) -> None:
    (state / "state.json").mkdir(parents=True)


def _unreadable_dir(state: Path) -> None:
    _good_state(state)
    state.chmod(0)


def _unreadable_state(state: Path) -> None:
    _good_state(state)
    (state / "state.json").chmod(0)


def _garbage_lock(state: Path) -> None:
    _good_state(state)
    (state / "state.lock").write_bytes(b"\x00\x01 not a lock\n")


def _plan_file(content: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def setup(state: Path) -> None:
        _good_state(state)
        path = state.parent / "ci.plan"
        plan = Plan(
            created_at=NOW, lineage="l", serial=1, listing_fingerprint="", actions=(), costs=()
        )
        planfile.write(path, planfile.SavedPlan(plan, str(LOCAL_SIM), {}, __version__))
        path.write_bytes(content(path.read_bytes()))

    return setup


def _ledger_directory(state: Path) -> None:
    _good_state(state)
    (state / "ledger.jsonl").mkdir()


@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[Path], None]
    commands: tuple[tuple[str, ...], ...]
    says: str  # a fragment of the one line
    needs_non_root: bool = False


STATE_COMMANDS = (
    ("status",),
    ("state", "list"),
    ("pin", "i1"),
    ("plan", str(LOCAL_SIM)),
    ("apply", str(LOCAL_SIM), "--auto-approve"),
    ("down", "local-sim", "--auto-approve"),
)
CASES = (
    Case("state-dir-is-a-file", _a_file, (*STATE_COMMANDS, ("ledger",)), "not a directory"),
    Case("state-dir-unreadable", _unreadable_dir, STATE_COMMANDS, "permission", True),
    Case("state-file-is-a-directory", _state_json_directory, STATE_COMMANDS, "state.json"),
    Case("state-file-unreadable", _unreadable_state, STATE_COMMANDS, "permission", True),
    Case("state-file-truncated", _state_file(lambda b: b[: len(b) // 2]), STATE_COMMANDS, "JSON"),
    Case(
        "state-file-garbage", _state_file(lambda b: b"\xff\xfe\x00garbage"), STATE_COMMANDS, "JSON"
    ),
    Case("state-file-truncated-backup", _truncated_with_backup, STATE_COMMANDS, "backup"),
    Case("state-file-newer", _state_file(_envelope(version=99)), STATE_COMMANDS, "newer"),
    Case("state-file-lineage-type", _state_file(_envelope(lineage=42)), STATE_COMMANDS, "lineage"),
    Case(
        "lock-file-garbage",
        _garbage_lock,
        (("pin", "i1"), ("apply", str(LOCAL_SIM), "--auto-approve"), ("down", "local-sim")),
        "state.lock",
    ),
    Case("plan-truncated", _plan_file(lambda b: b[: len(b) // 2]), (("apply", "PLAN"),), "ci.plan"),
    Case("plan-garbage", _plan_file(lambda b: b"\x00garbage\xff"), (("apply", "PLAN"),), "ci.plan"),
    Case(
        "plan-newer",
        _plan_file(lambda b: json.dumps({**json.loads(b), "file_version": 99}).encode()),
        (("apply", "PLAN"),),
        "ci.plan",
    ),
    Case(
        "ledger-is-a-directory",
        _ledger_directory,
        (("ledger",), ("pin", "i1"), ("apply", str(LOCAL_SIM), "--auto-approve")),
        "ledger.jsonl",
    ),
)


def _tree(root: Path) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        found[key] = path.read_bytes() if path.is_file() and os.access(path, os.R_OK) else None
    return found


PARAMS = [
    pytest.param(case, command, id=f"{case.name}:{command[0]}")
    for case in CASES
    for command in case.commands
]


@pytest.mark.parametrize(("case", "command"), PARAMS)
def test_bad_local_input_is_one_clean_line(
    tmp_path: Path, case: Case, command: tuple[str, ...]
) -> None:
    if case.needs_non_root and ROOT_USER:
        pytest.skip("root reads files whatever their mode")
    state = tmp_path / ".ray-vast"
    case.setup(state)
    argv = [str(tmp_path / "ci.plan") if part == "PLAN" else part for part in command]
    before = _tree(tmp_path)
    try:
        result = CliRunner().invoke(app, [*argv, "--state-dir", str(state)], env=ENV)
    finally:
        for path in (state, state / "state.json"):
            if path.exists() and not path.is_symlink():
                path.chmod(0o700 if path.is_dir() else 0o600)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1, result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.stderr
    assert case.says in lines[0]
    if case.name.startswith("plan"):
        assert "ci.plan" in lines[0] and "make a new plan with `ray-vast plan" in lines[0]
    elif case.name.startswith("ledger"):
        assert "ledger.jsonl" in lines[0]
    else:
        assert str(state) in lines[0]
    assert _tree(tmp_path) == before


def test_the_state_dir_from_the_environment_pointing_at_a_file(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _a_file(state)
    result = CliRunner().invoke(app, ["status"], env={**ENV, "RAY_VAST_STATE_DIR": str(state)})
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error:") and str(state) in line and "RAY_VAST_STATE_DIR" in line
    assert state.read_bytes() == b"I am a file, not a directory\n"


def test_a_missing_state_dir_is_created(tmp_path: Path) -> None:
    state = tmp_path / "new" / ".ray-vast"
    result = CliRunner().invoke(app, ["pin", "i1", "--state-dir", str(state)], env=ENV)
    assert state.is_dir() and (state / "state.json").exists()
    assert "Traceback" not in result.stderr
    assert result.exit_code == 1 and "no record" in result.stderr.lower()


def test_an_unreadable_ledger_line_is_one_clean_line_and_the_rest_is_shown(
    tmp_path: Path,
) -> None:
    state = tmp_path / ".ray-vast"
    with LedgerWriter.open(ledger_path(state), clock=FakeClock(NOW)) as ledger:
        ledger.append(LedgerEvent("a", LedgerKind.NOTE, "first", "one"))
    with ledger_path(state).open("ab") as raw:
        raw.write(b'{"torn": \n')
    with LedgerWriter.open(ledger_path(state), clock=FakeClock(NOW)) as ledger:
        ledger.append(LedgerEvent("a", LedgerKind.NOTE, "second", "two"))
    result = CliRunner().invoke(app, ["ledger", "--state-dir", str(state)], env=ENV)
    assert result.exit_code == 0
    assert "first" in result.stdout and "second" in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Warning:") and "ledger.jsonl:2:" in line
    assert "LedgerLineSkipped" not in line and "cli.py" not in line
