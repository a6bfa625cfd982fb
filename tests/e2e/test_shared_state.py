"""The state in a database, through the real command against a served vastsim: SQLite and a real
PostgreSQL (`--state URL` / RAY_VAST_STATE_URL), `state migrate` from the files, a force-unlock
ledgered with who did it, and the database's password kept out of every output and record."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from reconciler.clock import SystemClock
from reconciler.state.backend import parse
from reconciler.state.errors import LockLostError
from reconciler.state.sql.store import SqlStore
from tests.pgserver import PgServer
from tests.served import API_KEY, LOCAL_SIM, World

PASSWORD = "pg-s3cret-" + uuid.uuid4().hex[:8]


def url_of(kind: str, tmp_path: Path, server: PgServer | None) -> str:
    if kind == "sqlite":
        return f"sqlite://{tmp_path / 'shared' / 'state.db'}"
    assert server is not None
    database = "rv_" + uuid.uuid4().hex[:10]
    server.new_database(database)
    # trust authentication takes any password: it is here to prove it is never said or saved
    return f"postgresql://{server.user}:{PASSWORD}@127.0.0.1:{server.port}/{database}"


@pytest.fixture(params=["sqlite", "postgresql"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None
    return url_of(request.param, tmp_path, server)


def run(world: World, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`ray-vast --state URL ARGS` (the root option, before the command)."""
    return world.run("--state", url, *args)


def outputs(*done: subprocess.CompletedProcess[str]) -> str:
    return "".join(d.stdout + d.stderr for d in done)


def test_plan_apply_status_ledger_on_a_database_state(
    world: World, shared: str, tmp_path: Path
) -> None:
    saved = tmp_path / "p.plan"
    planned = run(world, shared, "plan", str(LOCAL_SIM), "-out", str(saved))
    assert planned.returncode == 0, planned.stderr
    applied = run(world, shared, "apply", str(saved))
    assert applied.returncode == 0, applied.stderr
    assert len(world.sim.instances) == 2
    shown = run(world, shared, "status", str(LOCAL_SIM), "--json")
    (cluster,) = json.loads(shown.stdout)["clusters"]
    assert {i["vast_id"] for i in cluster["instances"]} == set(world.sim.instances)
    ledger = run(world, shared, "ledger", "--json")
    lines = [json.loads(line) for line in ledger.stdout.splitlines()]
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    assert sum(1 for e in lines if e["kind"] == "outcome" and "rented" in e["message"]) == 2
    assert not (world.state_dir / "state.json").exists()  # the state is the database's
    assert not (world.state_dir / "ledger.jsonl").exists()
    said = outputs(planned, applied, shown, ledger)
    assert PASSWORD not in said and API_KEY not in said
    wrong = run(world, shared, "state", "force-unlock", str(uuid.uuid4()))
    assert wrong.returncode == 1 and "nothing to unlock" in wrong.stderr
    assert PASSWORD not in wrong.stderr
    gone = run(world, shared, "down", "local-sim", "--auto-approve")
    assert gone.returncode == 0, gone.stderr
    assert world.sim.instances == {}


def test_state_migrate_moves_the_files_state_whole_into_a_database(
    world: World, shared: str
) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    before = json.loads((world.state_dir / "state.json").read_text())
    before_lines = (world.state_dir / "ledger.jsonl").read_text().splitlines()
    until = ["--until", f"{time.time():.3f}", "--json"]  # one window for both bills
    billed = json.loads(world.run("cost", *until).stdout)
    moved = world.run("state", "migrate", f"file://{world.state_dir}", shared)
    assert moved.returncode == 0, moved.stderr
    assert f"serial {before['serial']}" in moved.stdout and PASSWORD not in moved.stdout
    again = world.run("state", "migrate", f"file://{world.state_dir}", shared)
    assert again.returncode == 1 and "only into an empty store" in again.stderr
    plan = run(world, shared, "plan", str(LOCAL_SIM), "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr  # the same machines: no change
    ledger = run(world, shared, "ledger", "--json")
    lines = [json.loads(line) for line in ledger.stdout.splitlines()]
    assert [json.loads(line) for line in before_lines] == lines[: len(before_lines)]
    assert lines[-1]["class"] == "state_migrated" and lines[-1]["seq"] == len(before_lines) + 1
    status = run(world, shared, "status", str(LOCAL_SIM), "--json")
    assert json.loads(status.stdout)["lineage"] == before["lineage"]
    # `cost` with no spec directory reads the database's records and ledger: the same bill
    assert json.loads(run(world, shared, "cost", *until).stdout) == billed


def test_a_force_unlock_is_ledgered_with_who_removed_whose_lock(world: World, shared: str) -> None:
    assert run(world, shared, "apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    holder = _holder(shared, world.state_dir)
    try:
        info = holder.lock("apply")  # another runner's apply (a watch would take the order)
        refused = run(world, shared, "plan", str(LOCAL_SIM))
        assert refused.returncode == 0  # plan takes no lock
        blocked = run(world, shared, "apply", str(LOCAL_SIM), "--auto-approve")
        assert blocked.returncode == 1 and info.id in blocked.stderr
        assert "Fencing:" in blocked.stderr and PASSWORD not in blocked.stderr
        removed = run(world, shared, "state", "force-unlock", info.id)
        assert removed.returncode == 0, removed.stderr
    finally:
        with contextlib.suppress(LockLostError):  # it was force-unlocked: that is the test
            holder.close()
    ledger = run(world, shared, "ledger", "--class", "lock_force_unlocked", "--json")
    (line,) = [json.loads(x) for x in ledger.stdout.splitlines()]
    assert line["data"]["removed"]["id"] == info.id and "@" in line["data"]["by"]


def _holder(url: str, state_dir: Path) -> SqlStore:
    """Another process's lease, as this test holds it (a `watch` elsewhere)."""
    parsed = parse(url, cwd=state_dir)
    return SqlStore(parsed.dialect(), clock=SystemClock(), workspace=parsed.workspace)
