"""CI runners against one shared state in a real PostgreSQL, the way they fail in the field: two
race to apply one reviewed plan; one is killed mid-apply; one is frozen past its lease.

Every runner is a real `ray-vast` process on a spec repository of its own (a git work tree: the
reviewed plan is keyed by its tree), against one served vastsim. Leases are 3 s here (60 s in
use). Waits are on conditions with deadlines, never sleeps.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.clock import SystemClock
from reconciler.state.backend import parse
from reconciler.state.errors import Liveness
from reconciler.state.lock import LockHolder
from reconciler.state.sql.store import SqlStore
from tests.ci import gitrepo
from tests.pgserver import PgServer
from tests.served import LOCAL_SIM, World
from tests.tcprelay import relay
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE

LEASE = 3.0
ROUNDS = 20


def spec(cpu_min: int) -> str:
    text = LOCAL_SIM.read_text().replace("max_dollars_per_hour: 1.00", "max_dollars_per_hour: 5.00")
    text = text.replace(
        "      min_workers: 1           # keep one", f"      min_workers: {cpu_min}  # keep"
    )
    return text.replace("      max_workers: 2\n", "      max_workers: 4\n", 1)


@dataclass
class Team:
    """A spec repository, the shared state's URL, and how its runners are started."""

    world: World
    repo: Path
    url: str
    base: Path
    lease: float = LEASE

    def env(self) -> dict[str, str]:
        lease = {"RAY_VAST_LEASE_SECONDS": str(self.lease)}
        return {**self.world.env, "RAY_VAST_STATE_URL": self.url, **lease}

    def argv(self, *args: str) -> list[str]:
        local = self.base / f"runner-{uuid.uuid4().hex[:6]}"  # each runner its own machine
        return [sys.executable, "-m", "reconciler", *args, "--state-dir", str(local)]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), env=self.env(), cwd=self.repo, capture_output=True, text=True,
            timeout=180, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args), env=self.env(), cwd=self.repo, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def review(self, cpu_min: int) -> None:
        gitrepo.commit(self.repo, {"clusters/local-sim.yaml": spec(cpu_min)}, f"cpu {cpu_min}")
        planned = self.run("plan", "clusters", "-out", str(self.base / "pr.plan"), "--review")
        assert planned.returncode == 0, planned.stderr


@pytest.fixture(params=["postgresql", "sqlite"])
def team(request: pytest.FixtureRequest, world: World, tmp_path: Path) -> Iterator[Team]:
    """The runners' shared state: a database on the PostgreSQL server, or one SQLite file
    (runners on one machine)."""
    repo = gitrepo.init(tmp_path / "specs")
    gitrepo.commit(repo, {"clusters/local-sim.yaml": spec(0)}, "idle")
    if request.param == "sqlite":
        yield Team(world, repo, f"sqlite://{tmp_path / 'shared' / 'state.db'}", tmp_path)
        return
    server: PgServer = request.getfixturevalue("pg_server")
    database = "team_" + uuid.uuid4().hex[:10]
    server.new_database(database)
    url = f"postgresql://{server.user}@127.0.0.1:{server.port}/{database}"
    yield Team(world, repo, url, tmp_path)


def creates(world: World) -> int:
    return sum(1 for r in world.sim.requests if r.route == CREATE_ROUTE)


def finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, out + err


def test_two_runners_race_one_reviewed_plan_and_exactly_one_applies(team: Team) -> None:
    world = team.world
    shared = team.url
    for round_ in range(ROUNDS):
        # a state of its own each round (a workspace of the one database): the rounds' downs
        # and rents would otherwise look like a rent loop, and the breaker would pause them
        team.url = f"{shared}?workspace=round{round_}"
        team.review(cpu_min=1 + round_ % 2)
        before = creates(world)
        wait = "30" if round_ % 4 == 3 else "0"  # now and then the loser waits for the lock
        first = team.start("apply", "--reviewed", "clusters", "--lock-timeout", wait)
        _jitter(random.uniform(0.0, 0.01))  # 0 to 10 ms between the two
        second = team.start("apply", "--reviewed", "clusters", "--lock-timeout", wait)
        outcomes = [finish(first), finish(second)]
        codes = sorted(code for code, _ in outcomes)
        assert codes[0] == 0 and codes[1] in (1, 3), outcomes
        if wait != "0":  # told to wait, the loser gets the lock after the winner: stale
            assert codes[1] == 3, outcomes
        loser = next(text for code, text in outcomes if code != 0)
        if codes[1] == 1:  # refused at once: it names the winner's lease
            assert "held" in loser and "Operation: apply" in loser and "expires in" in loser
        else:  # it waited (or came late): the plan was applied, so it is stale
            assert "already" in loser or "stale" in loser
        assert creates(world) - before == 2 * (1 + round_ % 2), outcomes  # once per rent
        down = team.run("down", "local-sim", "--spec-dir", "clusters", "--auto-approve")
        assert down.returncode == 0, down.stderr
        assert world.sim.instances == {}


def _jitter(seconds: float) -> None:
    """Spin for `seconds` (a start offset far below a sleep's granularity; no condition)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_runner_killed_mid_apply_is_taken_over_after_its_lease_and_nothing_is_rented_twice(
    team: Team,
) -> None:
    world = team.world
    team.lease = 8.0  # long enough that the next runner starts before it lapses
    team.review(cpu_min=2)  # 2 slots x candidate_factor 2: 4 creates
    world.sim.faults.slow(CREATE_ROUTE, seconds=1.0, count=4)
    doomed = team.start("apply", "--reviewed", "clusters")
    # killed while its third create is held up at vast (arrived, not yet carried out): the
    # create goes through, and the next runner must find it by its label, not rent again
    wait_for(lambda: world.sim.faults.slow_left(CREATE_ROUTE) <= 1, 60, "third create sent")
    doomed.send_signal(signal.SIGKILL)
    finish(doomed)
    refused = team.run("apply", "clusters", "--auto-approve")
    assert refused.returncode == 1, refused.stderr
    # PostgreSQL proves the holder's session gone; a SQLite file can only wait out the lease
    said = "lapses in" if team.url.startswith("postgresql") else "still holds it"
    assert said in refused.stderr, refused.stderr
    after = team.run("apply", "clusters", "--auto-approve", "--lock-timeout", "60")
    assert after.returncode == 0, after.stdout + after.stderr
    labels = [i.label for i in world.sim.instances.values()]
    told = after.stdout + team.run("ledger", "--json").stdout
    assert len(labels) == len(set(labels)) == 4, told  # the killed run's rentals found, once
    assert creates(world) == 4, told
    taken = team.run("ledger", "--class", "lock_taken_over", "--json")
    (line,) = [json.loads(x) for x in taken.stdout.splitlines()]
    assert line["data"]["fencing"] == line["data"]["dead"]["fencing"] + 1


def test_a_runner_frozen_past_its_lease_makes_no_call_after_it_resumes(team: Team) -> None:
    if not team.url.startswith("postgresql"):
        # a process frozen inside one of its (millisecond) write transactions holds a SQLite
        # file's write lock until it resumes: no server can end it, as PostgreSQL ends a
        # session idle in a transaction. SQLite is the one-machine state; teams use PostgreSQL.
        pytest.skip("a frozen SQLite writer can hold the file's lock; PostgreSQL's case")
    world = team.world
    team.review(cpu_min=2)
    world.sim.faults.slow(CREATE_ROUTE, seconds=1.0, count=4)
    frozen = team.start("apply", "--reviewed", "clusters")
    wait_for(lambda: len(world.sim.instances) >= 2, 60, "two creates made")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        lapsed = wait_for(lambda: _lapsed(team), 60, "the frozen runner's lease lapsed", every=0.2)
        if lapsed is not True:  # its session is still open: a person removes the lock
            assert lapsed.liveness is Liveness.STUCK
            removed = team.run("state", "force-unlock", lapsed.info.id)
            assert removed.returncode == 0, removed.stderr
        after = team.run("apply", "clusters", "--auto-approve", "--lock-timeout", "60")
        assert after.returncode == 0, after.stdout + after.stderr
        made = creates(world)
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    code, said = finish(frozen)
    assert code == 1 and "no longer this process's" in said, said
    # resumed, it calls vast no more: its lease is checked (the database's word, then its own
    # deadline) right before every call. The one call it can still send is one it had decided
    # and checked in the instant before it was frozen (the check and the send are not atomic;
    # vast cannot check a fencing token): that create was recorded as an intent first, so it is
    # found by its label, never a second machine for one slot.
    assert creates(world) <= made + 1
    labels = [i.label for i in world.sim.instances.values()]
    # nothing rented twice: one instance per create, each label once (a create the frozen run
    # had recorded but not sent still counts toward its request until its grace ends)
    assert len(labels) == len(set(labels)) == creates(world) >= 3


def _lapsed(team: Team) -> LockHolder | bool | None:
    """True once the lease is gone (its session ended with it), the holder once it lapsed with
    its session open; None while it lasts."""
    parsed = parse(team.url, cwd=team.base)
    store = SqlStore(parsed.dialect(), clock=SystemClock(), workspace=parsed.workspace)
    try:
        holder = store.lock_holder()
    finally:
        store.close()
    if holder is None or holder.liveness is Liveness.DEAD:
        return True
    return holder if holder.liveness is Liveness.STUCK else None


def test_the_database_restarted_mid_apply_loses_no_write(team: Team, pg_server: PgServer) -> None:
    if not team.url.startswith("postgresql"):
        pytest.skip("a SQLite file has no server to restart")
    world = team.world
    team.lease = 20.0  # the restart takes a few seconds; the lease outlives it
    team.review(cpu_min=2)
    world.sim.faults.slow(CREATE_ROUTE, seconds=1.0, count=4)
    running = team.start("apply", "--reviewed", "clusters")
    wait_for(lambda: len(world.sim.instances) >= 2, 60, "two creates made")
    pg_server.restart()
    code, said = finish(running)
    assert code == 0, said
    shown = json.loads(team.run("status", "clusters", "--json").stdout)
    recorded = {i["vast_id"] for c in shown["clusters"] for i in c["instances"]}
    assert recorded == set(world.sim.instances) and creates(world) == 4  # every outcome saved
    again = team.run("plan", "clusters", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout  # nothing left to do: no write was lost


def test_a_database_outage_longer_than_the_lease_stops_the_apply_and_another_runner_takes_over(
    team: Team, pg_server: PgServer
) -> None:
    if not team.url.startswith("postgresql"):
        pytest.skip("a SQLite file has no server to lose")
    world = team.world
    team.review(cpu_min=2)
    world.sim.faults.slow(CREATE_ROUTE, seconds=1.0, count=4)
    cut_off = team.start("apply", "--reviewed", "clusters")
    # cut off while its third create is held up at vast: that create goes through, its outcome
    # cannot be saved, and the next runner finds it by its label (cut off between a saved intent
    # and its call, the next runner would rightly hold that slot until the create's grace ends)
    wait_for(lambda: world.sim.faults.slow_left(CREATE_ROUTE) <= 1, 60, "third create sent")
    pg_server.stop()
    try:
        code, said = finish(cut_off)  # it cannot renew: it stops at its own lease's end
        stopped_at = creates(world)
    finally:
        pg_server.start()
    assert code == 1 and "lease" in said, said
    assert "Traceback" not in said, said
    after = team.run("apply", "clusters", "--auto-approve", "--lock-timeout", "60")
    assert after.returncode == 0, after.stdout + after.stderr
    told = after.stdout + team.run("ledger", "--json").stdout
    labels = [i.label for i in world.sim.instances.values()]
    # every planned instance once: the cut-off run's creates found by label, the rest rented
    assert len(labels) == len(set(labels)) == creates(world) == 4, (stopped_at, told)
    taken = team.run("ledger", "--class", "lock_taken_over", "--json")
    assert taken.stdout.strip(), told  # the dead holder's lease was taken over, not removed
    again = team.run("plan", "clusters", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout


def test_a_runner_whose_path_to_the_database_goes_silent_calls_vast_no_more(
    team: Team, pg_server: PgServer
) -> None:
    """The path from a runner to the database carries nothing (a partition, or a server that
    stopped answering): no refusal, no reset. The runner makes no call to vast once its lease
    may have ended; the database still sees its session, so its lease is STUCK and a person
    removes it; the next runner goes on; when the path heals, the cut-off runner's late write
    is refused and it stops. (Had its write begun a transaction when the path went silent, the
    server ends that session after 2 s and the lease is taken over with no person.)"""
    if not team.url.startswith("postgresql"):
        pytest.skip("a SQLite file has no network path")
    world = team.world
    team.review(cpu_min=2)
    world.sim.faults.slow(CREATE_ROUTE, seconds=1.0, count=4)
    with relay(("127.0.0.1", pg_server.port)) as path:
        direct = team.url
        team.url = direct.replace(f":{pg_server.port}/", f":{path.port}/")
        silent = team.start("apply", "--reviewed", "clusters")
        team.url = direct
        wait_for(lambda: world.sim.faults.slow_left(CREATE_ROUTE) <= 1, 60, "third create sent")
        path.blackhole()
        stuck = wait_for(lambda: _lapsed(team), 60, "the silent runner's lease lapsed", every=0.2)
        made = creates(world)  # its lease has lapsed by the database's clock: no call after it
        if stuck is not True:  # its session is open (idle, not in a transaction): a person
            assert stuck.liveness is Liveness.STUCK  # removes the lock, as the error says
            removed = team.run("state", "force-unlock", stuck.info.id)
            assert removed.returncode == 0, removed.stderr
        after = team.run("apply", "clusters", "--auto-approve", "--lock-timeout", "60")
        assert after.returncode == 0, after.stdout + after.stderr
        path.heal()
        code, said = finish(silent)
    assert code == 1 and "no longer this process's" in said, said
    told = team.run("ledger", "--json").stdout
    labels = [i.label for i in world.sim.instances.values()]
    assert made <= 3, told  # the third create was at vast when the path went silent; no fourth
    assert len(labels) == len(set(labels)) == creates(world) == 4, told
