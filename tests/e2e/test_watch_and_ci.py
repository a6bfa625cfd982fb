"""`watch` and CI on one state in a real PostgreSQL: while the watch holds the lease, a pipeline's
`apply --reviewed` (on another machine) is handed to it, carried out under its lease and
answered; a `pin` from another machine is taken; the watch then keeps what it applied."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.live import free_port
from reconciler.clock import SystemClock
from reconciler.state.backend import parse
from reconciler.state.sql.store import SqlStore
from tests.ci import gitrepo
from tests.pgserver import PgServer
from tests.served import LOCAL_SIM, ROOT, World
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE


def spec(cpu_min: int, port: int) -> str:
    text = LOCAL_SIM.read_text().replace("metrics_port: 19464", f"metrics_port: {port}")
    return text.replace(
        "      min_workers: 1           # keep one", f"      min_workers: {cpu_min}  # keep"
    )


@pytest.fixture
def shared(pg_server: PgServer) -> str:
    database = "together_" + uuid.uuid4().hex[:10]
    pg_server.new_database(database)
    return f"postgresql://{pg_server.user}@127.0.0.1:{pg_server.port}/{database}"


def env_of(world: World, url: str) -> dict[str, str]:
    return {**world.env, "RAY_VAST_STATE_URL": url}


def cli(
    world: World, url: str, cwd: Path, machine: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args, "--state-dir", str(machine)],
        env=env_of(world, url), cwd=cwd, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip


@pytest.fixture
def watching(
    world: World, shared: str, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    specs = tmp_path / "head" / "specs"
    specs.mkdir(parents=True)
    (specs / "local-sim.yaml").write_text(spec(0, port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", str(specs), "--state-dir",
         str(tmp_path / "head" / "state")],
        env=env_of(world, shared), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _holder(shared) == proc.pid, 60, "the watch holds the lease")
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _store(url: str) -> SqlStore:
    parsed = parse(url, cwd=ROOT)
    return SqlStore(parsed.dialect(), clock=SystemClock(), workspace=parsed.workspace)


def _holder(url: str) -> int | None:
    store = _store(url)
    try:
        holder = store.lock_holder()
    finally:
        store.close()
    return holder.info.pid if holder is not None else None


def _snapshot(url: str) -> dict[str, Any]:
    store = _store(url)
    try:
        snapshot = store.read()
    finally:
        store.close()
    assert snapshot is not None
    return dict(snapshot.records)


def _records(url: str) -> dict[str, dict[str, object]]:
    return dict(_snapshot(url)["instances"])


def test_a_pipelines_reviewed_apply_and_a_pin_from_elsewhere_go_through_the_watch(
    world: World, shared: str, watching: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    proc, port = watching
    repo = gitrepo.init(tmp_path / "ci")
    gitrepo.commit(repo, {"clusters/local-sim.yaml": spec(1, port)}, "one cpu worker")
    runner = tmp_path / "runner"
    planned = cli(
        world, shared, repo, runner, "plan", "clusters", "-out", str(tmp_path / "p"), "--review"
    )
    assert planned.returncode == 0, planned.stderr  # plan takes no lock: beside the watch
    applied = cli(world, shared, repo, runner, "apply", "--reviewed", "clusters")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "is handed to it" in applied.stdout and "Applied by this watch" in applied.stdout
    assert len(world.sim.instances) == 2  # its 2 rents, made by the watch under its lease
    made = sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE)

    elsewhere = tmp_path / "laptop"
    record = next(iter(_records(shared)))
    pinned = cli(world, shared, ROOT, elsewhere, "pin", record, "--for", "1h")
    assert pinned.returncode == 0 and "handed to it" in pinned.stdout, pinned.stderr
    wait_for(lambda: _records(shared)[record].get("pinned_by"), 30, "the watch took the pin")

    again = cli(world, shared, repo, runner, "apply", "--reviewed", "clusters")
    assert again.returncode == 3  # applied already: never twice
    # the watch keeps what it applied (its own specs said 0 workers): nothing ended, nothing more
    shown = json.loads(cli(world, shared, ROOT, elsewhere, "status", "--json").stdout)
    assert len([i for c in shown["clusters"] for i in c["instances"]]) == 2
    assert sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE) == made
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "order" in err and "Applied by this watch" in err, err[-3000:]


def test_a_down_from_another_machine_is_carried_out_by_the_watch_and_it_rents_nothing_back(
    world: World, shared: str, watching: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    proc, port = watching
    repo = gitrepo.init(tmp_path / "ci")
    gitrepo.commit(repo, {"clusters/local-sim.yaml": spec(1, port)}, "one cpu worker")
    runner = tmp_path / "runner"
    applied = cli(world, shared, repo, runner, "apply", "clusters", "--auto-approve")
    assert applied.returncode == 0 and "Applied by this watch" in applied.stdout, applied.stderr
    assert len(world.sim.instances) == 2
    made = sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE)

    laptop = tmp_path / "laptop"
    down = cli(world, shared, ROOT, laptop, "down", "local-sim", "--auto-approve")
    assert down.returncode == 0, down.stdout + down.stderr
    assert "will destroy 2 instance(s)" in down.stdout and "holds local-sim down" in down.stdout
    assert "Down complete: 2 instance(s) of local-sim destroyed." in down.stdout
    assert world.sim.instances == {}  # vast confirmed every destroy before it said so
    # the watch plans the held cluster on: its records close once vast lists them gone, and it
    # rents nothing back for the spec it still reconciles
    wait_for(
        lambda: all(r["phase"] == "destroyed" for r in _records(shared).values()),
        120,
        "the watch closed the destroyed machines' records",
    )
    assert sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE) == made
    assert proc.poll() is None, "the watch runs on"
    # applying the cluster again lifts the hold, even a spec that plans no change (no worker)
    gitrepo.commit(repo, {"clusters/local-sim.yaml": spec(0, port)}, "no worker")
    again = cli(world, shared, repo, runner, "apply", "clusters", "--auto-approve")
    assert again.returncode == 0 and "Applied by this watch" in again.stdout, again.stdout
    assert _snapshot(shared)["clusters"]["local-sim"]["down_at"] is None
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "held down" in err, err[-3000:]
