"""`ray-vast watch` as a real process against a served vastsim: spec changes, Git, signals."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.live import free_port
from tests.served import LOCAL_SIM, ROOT, World
from tests.waiting import wait_for
from vastsim.faults import LIST_ROUTE, Canned


def spec_text(min_workers: int, metrics_port: int) -> str:
    """local-sim.yaml on ports of its own (the example's head ports clash with another test's
    watch when tests run side by side in one network namespace)."""
    return (
        LOCAL_SIM.read_text()
        .replace("min_workers: 1 ", f"min_workers: {min_workers} ")
        .replace("metrics_port: 19464", f"metrics_port: {metrics_port}")
        .replace("enroll_port: 18443", f"enroll_port: {free_port()}")
        .replace("heartbeat_port: 18444", f"heartbeat_port: {free_port()}")
    )


@pytest.fixture
def watcher(world: World) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reconciler",
                "watch",
                *args,
                "--state-dir",
                str(world.state_dir),
            ],
            env=world.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=30)
        print(f"watch (pid {proc.pid}) said:\n{err[-4000:]}")  # shown when the test failed


def test_spec_change_reconciles_at_once_and_sigterm_stops(
    world: World, watcher: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "local-sim.yaml"
    spec.write_text(spec_text(1, port))
    proc = watcher(str(specs), "--log-format", "json")
    wait_for(lambda: len(world.sim.instances) == 2)  # 1 slot x candidate_factor 2

    def metrics() -> str:
        url = f"http://127.0.0.1:{port}/metrics"
        return str(urllib.request.urlopen(url, timeout=10).read().decode())

    # the gauges are refreshed when the tick that rented ends, a moment after vast has the rentals
    wait_for(lambda: 'ray_vast_cluster_dollars_per_hour{cluster="local-sim"}' in metrics(), 10)

    spec.write_text(spec_text(2, port))
    wait_for(lambda: len(world.sim.instances) == 4, timeout=20)  # well before the 60 s cadence

    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    messages = [line["message"] for line in lines]
    assert any("specs reloaded" in m for m in messages)
    assert any("watch stopped" in m for m in messages)
    assert all({"time", "level", "message"} <= set(line) for line in lines)
    # the lock was released: another writer may run
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_git_mode_pulls_and_records_the_revision(
    world: World, watcher: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    port = free_port()
    bare = tmp_path / "specs.git"
    work = tmp_path / "work"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), cwd=tmp_path)
    git("clone", "--quiet", str(bare), str(work), cwd=tmp_path)
    (work / "local-sim.yaml").write_text(spec_text(1, port))
    git("add", ".", cwd=work)
    git("commit", "--quiet", "-m", "one worker", cwd=work)
    git("push", "--quiet", "origin", "HEAD:main", cwd=work)

    proc = watcher(
        str(tmp_path / "checkout"), "--git", str(bare), "--branch", "main", "--git-interval", "5"
    )
    wait_for(lambda: len(world.sim.instances) == 2)

    (work / "local-sim.yaml").write_text(spec_text(2, port))
    git("commit", "--quiet", "-am", "two workers", cwd=work)
    git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    revision = git("rev-parse", "HEAD", cwd=work)
    wait_for(lambda: len(world.sim.instances) == 4, timeout=30)

    def recorded() -> str | None:
        state = json.loads((world.state_dir / "state.json").read_text())
        return state["records"]["clusters"]["local-sim"]["revision"]

    wait_for(lambda: recorded() == revision, timeout=10)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert f"at revision {revision}" in err
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0


def test_invalid_spec_change_keeps_the_cluster(
    world: World, watcher: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    port = free_port()
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "local-sim.yaml"
    spec.write_text(spec_text(1, port))
    proc = watcher(str(specs))
    wait_for(lambda: len(world.sim.instances) == 2)
    spec.write_text(spec_text(1, port).replace("max_workers: 2", "max_workers: nope"))
    before = set(world.sim.instances)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # a few loop turns with the broken spec in place
        assert set(world.sim.instances) == before
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert "do not load" in err and "max_workers" in err
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0


def test_a_second_sigint_exits_at_once_with_a_warning(
    world: World, watcher: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    """DESIGN.md 9: the first SIGINT lets the call in flight finish; a second exits at once, even
    while a tick is blocked on a slow vast (here: a listing that takes 20 s to answer)."""
    port = free_port()
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "local-sim.yaml"
    spec.write_text(spec_text(1, port))
    proc = watcher(str(specs))
    wait_for(lambda: len(world.sim.instances) == 2)

    slow, listing, release = threading.Event(), threading.Event(), threading.Event()
    take = world.sim.faults.take

    def slow_listing(route: str, *, after: bool) -> Canned | None:
        if slow.is_set() and route == LIST_ROUTE and not after:
            listing.set()
            release.wait(20)
        return take(route, after=after)

    world.sim.faults.take = slow_listing  # type: ignore[method-assign]
    try:
        slow.set()
        spec.write_text(spec_text(2, port))  # the reload reconciles at once: a listing
        assert listing.wait(20), "the watch never listed"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first signal waits for the call in flight
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        exited = time.monotonic() - second
    finally:
        release.set()
    _, err = proc.communicate(timeout=30)
    assert exited < 1.0, f"exited {exited:.1f} s after the second signal"
    assert proc.returncode == 128 + signal.SIGINT
    assert "finishing the tick" in err
    assert "again" in err and "exiting at once" in err
