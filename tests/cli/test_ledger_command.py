"""`ray-vast ledger` reads the story back, filtered by cluster, class, instance and time."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter, ledger_path
from reconciler.views.ledger import parse_since


def write(state: Path, clock: FakeClock) -> None:
    with LedgerWriter.open(ledger_path(state), clock=clock) as ledger:
        ledger.append(LedgerEvent("a", LedgerKind.DETECTION, "went_silent", "no report", "i1", 11))
        clock.advance(600)
        ledger.append(
            LedgerEvent("a", LedgerKind.CALL, "went_silent", "destroy 11", "i1", 11, -0.3)
        )
        ledger.append(
            LedgerEvent("b", LedgerKind.DETECTION, "orphan", "labelled, no record", None, 22)
        )


def test_filters_and_json(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)
    write(tmp_path, clock)
    run = CliRunner().invoke
    by_class = run(
        app, ["ledger", "--class", "went_silent", "--json", "--state-dir", str(tmp_path)]
    )
    lines = [json.loads(line) for line in by_class.stdout.splitlines()]
    assert by_class.exit_code == 0 and [e["kind"] for e in lines] == ["detection", "call"]
    by_cluster = run(app, ["ledger", "--cluster", "b", "--state-dir", str(tmp_path)])
    assert "orphan" in by_cluster.stdout and "went_silent" not in by_cluster.stdout
    by_instance = run(app, ["ledger", "--instance", "11", "--json", "--state-dir", str(tmp_path)])
    assert len(by_instance.stdout.splitlines()) == 2
    since = run(app, ["ledger", "--since", "1800000300", "--json", "--state-dir", str(tmp_path)])
    assert len(since.stdout.splitlines()) == 2
    human = run(app, ["ledger", "--state-dir", str(tmp_path)])
    assert "-0.300$/h" in human.stdout and "(vast 11)" in human.stdout


def test_since_accepts_durations_and_times() -> None:
    now = 1_800_000_000.0
    assert parse_since("30m", now) == now - 1800
    assert parse_since("2h", now) == now - 7200
    assert parse_since("1d", now) == now - 86400
    assert parse_since("2027-01-15T00:00:00", now) == 1_799_971_200.0  # UTC when no zone
    bad = CliRunner().invoke(app, ["ledger", "--since", "yesterday"])
    assert bad.exit_code == 1 and "--since" in bad.stderr
