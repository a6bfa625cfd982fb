"""Two `watch` processes on one state in a real PostgreSQL: the second is a standby. It binds no
port and changes nothing while the first holds the lease; when the first is killed with SIGKILL
it holds the lease within a lease period of the first's lapse, reconciles from vast's listing,
and no machine is lost or rented twice."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.live import free_port
from reconciler.clock import SystemClock
from reconciler.state.backend import parse
from reconciler.state.sql.store import SqlStore
from tests.pgserver import PgServer
from tests.served import LOCAL_SIM, ROOT, World
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE

LEASE = 4.0


@pytest.fixture
def shared(pg_server: PgServer) -> str:
    database = "standby_" + uuid.uuid4().hex[:10]
    pg_server.new_database(database)
    return f"postgresql://{pg_server.user}@127.0.0.1:{pg_server.port}/{database}"


@pytest.fixture
def watches(world: World, shared: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    spec = tmp_path / "specs" / "local-sim.yaml"
    spec.parent.mkdir()
    spec.write_text(
        LOCAL_SIM.read_text().replace("metrics_port: 19464", f"metrics_port: {free_port()}")
    )
    env = {**world.env, "RAY_VAST_STATE_URL": shared, "RAY_VAST_LEASE_SECONDS": str(LEASE)}
    started = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "watch",
                str(spec.parent),
                "--state-dir",
                str(tmp_path / f"machine-{n}"),
            ],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in (1, 2)
    ]
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def holder_pid(url: str) -> int | None:
    parsed = parse(url, cwd=ROOT)
    store = SqlStore(parsed.dialect(), clock=SystemClock(), workspace=parsed.workspace)
    try:
        holder = store.lock_holder()
    finally:
        store.close()
    return holder.info.pid if holder is not None and (holder.lease_left or 0) > 0 else None


def creates(world: World) -> int:
    return sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE)


def test_a_standby_watch_takes_over_within_a_lease_and_rents_nothing_twice(
    world: World, shared: str, watches: list[subprocess.Popen[str]]
) -> None:
    active_pid = wait_for(lambda: holder_pid(shared), 60, "one watch holds the lease")
    active = next(p for p in watches if p.pid == active_pid)
    standby = next(p for p in watches if p.pid != active_pid)
    wait_for(lambda: len(world.sim.instances) == 2, 60, "the active watch rented")  # 1 x 2
    rented, made = set(world.sim.instances), creates(world)
    assert standby.poll() is None  # waiting, not failed

    active.send_signal(signal.SIGKILL)
    active.communicate(timeout=30)
    killed = time.monotonic()
    wait_for(lambda: holder_pid(shared) == standby.pid, 4 * LEASE, "the standby holds the lease")
    took = time.monotonic() - killed
    assert took <= 2 * LEASE + 2  # the lease lapses within one period; a quarter to notice
    # it reconciles from the listing (its first refresh writes the state): the same machines
    # stay, nothing is rented again
    taken = serial(shared)
    wait_for(lambda: serial(shared) > taken, 120, "the standby reconciled", every=0.2)
    assert set(world.sim.instances) == rented and creates(world) == made
    standby.send_signal(signal.SIGTERM)
    _, err = standby.communicate(timeout=60)
    assert "standby:" in err and "lease is ours now" in err, err[-3000:]


def serial(url: str) -> int:
    parsed = parse(url, cwd=ROOT)
    store = SqlStore(parsed.dialect(), clock=SystemClock(), workspace=parsed.workspace)
    try:
        snapshot = store.read()
    finally:
        store.close()
    return snapshot.serial if snapshot is not None else 0
