"""Signals in every long command (DESIGN.md 9, issue 14), through real `ray-vast` processes.

The first SIGINT/SIGTERM finishes the call in flight, saves and exits; a second, while the first is
being honoured, exits at once (within a second) with a warning: in `apply`, `watch`, `up` and
`down`. Each test holds one vast endpoint of a served vastsim (the call in flight) while it signals.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.live import free_port
from reconciler.embedded import rayhead
from tests.e2e.test_live_seed import loopback_only
from tests.served import LOCAL_SIM, ROOT, World
from tests.waiting import wait_for
from vastsim.faults import CREATE_ROUTE, LIST_ROUTE, Canned

DESTROY_ROUTE = "DELETE /api/v0/instances/{id}/"
FIRST = "interrupt again to exit at once"
SECOND = "again: exiting at once"


class Gate:
    """Every request to `route` waits, before vast carries it out, until `release` is set;
    `entered` is set when the first one arrives (a call is then in flight)."""

    def __init__(self, world: World, route: str) -> None:
        self.route = route
        self.entered = threading.Event()
        self.release = threading.Event()
        take = world.sim.faults.take

        def gated(route: str, *, after: bool) -> Canned | None:
            if route == self.route and not after and not self.release.is_set():
                self.entered.set()
                self.release.wait(60)
            return take(route, after=after)

        world.sim.faults.take = gated  # type: ignore[method-assign]


@pytest.fixture
def gate(world: World) -> Iterator[Callable[[str], Gate]]:
    made: list[Gate] = []

    def hold(route: str) -> Gate:
        made.append(Gate(world, route))
        return made[-1]

    yield hold
    for each in made:  # the server's request threads must end before it closes
        each.release.set()


class Command:
    """`ray-vast ARGS --state-dir ...` running, its output read as it comes."""

    def __init__(self, world: World, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", *args, "--state-dir", str(world.state_dir)],
            env=world.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self._out: list[str] = []
        self._err: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=_drain, args=(self.proc.stdout, self._out), daemon=True),
            threading.Thread(target=_drain, args=(self.proc.stderr, self._err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def out(self) -> str:
        return "".join(self._out)

    @property
    def err(self) -> str:
        return "".join(self._err)

    def interrupt(self, sig: int = signal.SIGINT) -> float:
        self.proc.send_signal(sig)
        return time.monotonic()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    def exits_within(self, seconds: float, since: float) -> float:
        """Seconds from `since` to the exit (at most a few more than `seconds`, then it fails)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=seconds + 5)
        took = time.monotonic() - since
        assert self.proc.poll() is not None, f"still running {took:.1f} s after the signal"
        return took

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _drain(stream: Any, into: list[str]) -> None:
    for line in stream:
        into.append(line)


@pytest.fixture
def command(world: World) -> Iterator[Callable[..., Command]]:
    started: list[Command] = []

    def start(*args: str) -> Command:
        started.append(Command(world, *args))
        return started[-1]

    yield start
    for each in started:
        each.kill()


def state(world: World) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((world.state_dir / "state.json").read_text())
    return loaded


def instance_records(world: World) -> list[dict[str, Any]]:
    return list(state(world)["records"]["instances"].values())


def twice(cmd: Command, gate: Gate) -> None:
    """A call in flight; the first SIGINT waits for it; the second ends the process at once."""
    assert gate.entered.wait(120), "the command never made the call"
    cmd.interrupt()
    wait_for(lambda: FIRST in cmd.err, 10, "the first signal's message")
    assert cmd.proc.poll() is None  # still waiting for the call in flight
    second = cmd.interrupt()
    took = cmd.exits_within(1.0, second)
    gate.release.set()
    cmd.wait(10)
    assert took < 1.0, f"exited {took:.2f} s after the second signal"
    assert cmd.proc.returncode == 128 + signal.SIGINT
    assert SECOND in cmd.err, cmd.err
    assert "Traceback" not in cmd.err, cmd.err


# --- apply ---------------------------------------------------------------------------------


def test_apply_a_second_sigint_exits_at_once(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command]
) -> None:
    creating = gate(CREATE_ROUTE)
    cmd = command("apply", str(LOCAL_SIM), "--auto-approve")
    twice(cmd, creating)


def test_apply_a_first_sigint_finishes_the_call_saves_and_exits(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command]
) -> None:
    """The plan rents 2; the first SIGINT comes while the first create is at vast: that rent is
    finished and saved, the second is not made, and the lock is released."""
    creating = gate(CREATE_ROUTE)
    cmd = command("apply", str(LOCAL_SIM), "--auto-approve")
    assert creating.entered.wait(60), "apply never rented"
    cmd.interrupt()
    wait_for(lambda: FIRST in cmd.err, 10, "the first signal's message")
    assert cmd.proc.poll() is None
    creating.release.set()
    assert cmd.wait(60) == 1
    assert "Apply interrupted; state saved. Done: 1 rent." in cmd.err, cmd.err
    assert len(world.sim.instances) == 1  # the second rent was never asked for
    (record,) = [r for r in instance_records(world) if r["vast_id"] is not None]
    assert record["vast_id"] in world.sim.instances  # the finished call is in the state
    # the lock was released: the next apply finishes the plan
    again = world.run("apply", str(LOCAL_SIM), "--auto-approve")
    assert again.returncode == 0, again.stderr
    assert len(world.sim.instances) == 2


# --- watch ---------------------------------------------------------------------------------


def watch_spec(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    text = LOCAL_SIM.read_text().replace("metrics_port: 19464", f"metrics_port: {free_port()}")
    (specs / "local-sim.yaml").write_text(text)
    return specs


def test_watch_a_second_sigint_exits_at_once(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command], tmp_path: Path
) -> None:
    listing = gate(LIST_ROUTE)  # the first tick's listing
    cmd = command("watch", str(watch_spec(tmp_path)))
    twice(cmd, listing)


def test_watch_a_first_sigint_finishes_the_call_in_flight_and_exits(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command], tmp_path: Path
) -> None:
    """The listing in flight finishes; the tick's plan stops before its first rent (a first signal
    ends a plan after the call in flight, not after the plan: a 60-rent tick would take minutes);
    the state is saved and the next watch carries on."""
    listing = gate(LIST_ROUTE)
    spec = watch_spec(tmp_path)
    cmd = command("watch", str(spec))
    assert listing.entered.wait(60), "watch never listed"
    cmd.interrupt(signal.SIGTERM)
    wait_for(lambda: FIRST in cmd.err, 10, "the first signal's message")
    assert cmd.proc.poll() is None
    listing.release.set()
    assert cmd.wait(60) == 0, cmd.err
    assert "watch stopped after 1 tick(s); state saved" in cmd.err
    assert world.sim.instances == {}  # nothing rented after the signal, nothing unrecorded
    again = command("watch", str(spec), "--once")
    assert again.wait(60) == 0, again.err
    rented = {r["vast_id"] for r in instance_records(world)}
    assert rented == set(world.sim.instances) and len(rented) == 2  # the next watch rents


# --- up ------------------------------------------------------------------------------------

needs_loopback = pytest.mark.skipif(
    not loopback_only(), reason="Ray needs a loopback-only network namespace"
)


@pytest.fixture
def up_spec(world: World, tmp_path: Path) -> Iterator[Path]:
    """The example cluster on the served vastsim (`provider.type: vast`, VAST_URL), on free ports;
    its Ray head (which `up` leaves running, as it leaves the machines) is stopped afterwards."""
    text = (
        LOCAL_SIM.read_text()
        .replace("type: vastsim", "type: vast")
        .replace("ray_port: 6380", f"ray_port: {free_port()}")
        .replace("enroll_port: 18443", f"enroll_port: {free_port()}")
        .replace("heartbeat_port: 18444", f"heartbeat_port: {free_port()}")
        .replace("metrics_port: 19464", f"metrics_port: {free_port()}")
    )
    spec = tmp_path / "up.yaml"
    spec.write_text(text)
    yield spec
    rayhead.stop(world.state_dir, "local-sim")


@needs_loopback
def test_up_a_second_sigint_exits_at_once(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command], up_spec: Path
) -> None:
    listing = gate(LIST_ROUTE)  # the watch's first tick, once the Ray head is up
    cmd = command("up", str(up_spec), "--auto-approve")
    twice(cmd, listing)


@needs_loopback
def test_up_a_first_sigint_while_the_ray_head_starts_stops_before_renting(
    world: World, command: Callable[..., Command], up_spec: Path
) -> None:
    """The Ray head being started finishes starting (it is recorded, for `down` to stop); then
    up stops without watching: nothing is listed or rented."""
    cmd = command("up", str(up_spec), "--auto-approve")
    log = world.state_dir / "ray" / "local-sim-head.log"
    wait_for(log.exists, 60, "the Ray head's start")
    cmd.interrupt()
    assert cmd.wait(120) == 0, cmd.err
    assert FIRST in cmd.err
    assert "up stopped before watching" in cmd.err
    assert "Traceback" not in cmd.err, cmd.err
    assert rayhead.running(world.state_dir, "local-sim") is not None
    assert world.sim.counters.get(LIST_ROUTE, 0) == 0
    assert world.sim.instances == {}


# --- down ----------------------------------------------------------------------------------


def test_down_a_second_sigint_exits_at_once(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command]
) -> None:
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    destroying = gate(DESTROY_ROUTE)
    cmd = command("down", "local-sim", "--auto-approve")
    twice(cmd, destroying)


def test_down_a_first_sigint_finishes_the_destroy_in_flight_saves_and_exits(
    world: World, gate: Callable[[str], Gate], command: Callable[..., Command]
) -> None:
    """Two instances to destroy; the first SIGINT comes while the first destroy is at vast: that
    destroy is carried out and recorded, the second is not asked for, the lock is released, and
    the next `down` finishes."""
    assert world.run("apply", str(LOCAL_SIM), "--auto-approve").returncode == 0
    assert len(world.sim.instances) == 2
    destroying = gate(DESTROY_ROUTE)
    cmd = command("down", "local-sim", "--auto-approve")
    assert destroying.entered.wait(60), "down never destroyed"
    cmd.interrupt()
    wait_for(lambda: FIRST in cmd.err, 10, "the first signal's message")
    assert cmd.proc.poll() is None
    destroying.release.set()
    assert cmd.wait(120) == 1, cmd.out + cmd.err
    assert "Down interrupted; state saved." in cmd.err, cmd.err
    (left,) = world.sim.instances  # the second destroy was never asked for
    by_vast = {r["vast_id"]: r for r in instance_records(world)}
    assert by_vast[left]["phase"] not in ("destroying", "destroyed")
    (gone,) = set(by_vast) - {left}
    assert by_vast[gone]["phase"] == "destroyed"  # the finished call is in the state
    again = world.run("down", "local-sim", "--auto-approve")  # the lock was released
    assert again.returncode == 0, again.stderr
    assert world.sim.instances == {}
