"""Fixtures shared by every test folder, and the lanes tests run in.

The fast lane (`pytest -m "not e2e and not slow"`: unit tests and the scenario book, under a
minute on 2 cores) leaves out two kinds, marked here by where they live so no file can forget:
`e2e` (real processes end to end: ray-vast commands, containers, Ray) and `slow` (tests that
start real agent or watch processes, or run a benchmark).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The tests write bytecode caches (gitignored `__pycache__`) whatever PYTHONDONTWRITEBYTECODE
# says, and so do the processes they start: without them every xdist worker compiled the package
# and re-rewrote the asserts of ~280 test modules on every run (about 6 s of the fast lane), and
# every `ray-vast` process an end-to-end test starts compiled what it imports again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Ray reads its authentication mode once, when a process first imports it; some test modules
# import Ray at collection (the packing corpus runs Ray's scheduler as its oracle), and every
# Ray head ray-vast talks to runs with token auth, as in `watch` and `up`.
os.environ.setdefault("RAY_AUTH_MODE", "token")

from tests import pgserver  # noqa: E402 (after the bytecode and Ray settings above)
from tests.served import world  # noqa: E402
from vastsim.containers.sweep import MARKER  # noqa: E402

__all__ = ["world"]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pgserver.PgServer]:
    """One real PostgreSQL server for this test process (tests/pgserver.py); each test takes a
    workspace or a database of its own in it."""
    with pgserver.running() as server:
        yield server


HERE = Path(__file__).parent
# Whole folders or files of each lane (relative to tests/).
E2E = ("e2e/",)
SLOW = (
    "agent/test_endings.py",
    "agent/test_bootloader.py",
    "watch/test_watch_process.py",
    "bench/",
    "vastsim/test_process_runner.py",
    "head/test_service_limits.py",
    "watch/test_lock_discipline.py",
    "watch/test_ray_readers_live.py",
    # real processes: ray-vast commands, agents in containers, lock holders, a served vastsim
    "cli/test_down_ray_head.py",
    "head/test_ray_versions_served.py",
    "state/test_lock_processes.py",
    "state/test_lease.py",
    "vastsim/test_serve_cli.py",
    "agent/test_gpus.py::test_a_simulated_gpu_worker",
    "vastsim/test_process_cgroups.py",
    # a simulated day each (the bill against the meter; ray-vast simulate's runs)
    "scenarios/test_cost_against_meter.py",
    "cli/test_simulate_command.py",
    # the pipeline harness's own tests: git worktrees and a bash per step
    "ci/test_harness.py",
)


# `.ci/run` runs the end-to-end tests in two lanes (each in a network namespace of its own):
# RAY_VAST_E2E_SHARD=i/n keeps the e2e files whose place in the sorted list is i modulo n.
SHARD_VARIABLE = "RAY_VAST_E2E_SHARD"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # the test's file (and name) below tests/: a lane names a folder, a file or one test
        where = Path(str(item.fspath)).relative_to(HERE).as_posix()
        where += item.nodeid[item.nodeid.index("::") :] if "::" in item.nodeid else ""
        if where.startswith(E2E):
            item.add_marker(pytest.mark.e2e)
        if where.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
    shard = os.environ.get(SHARD_VARIABLE)
    if shard:
        _keep_shard(config, items, shard)


def _keep_shard(config: pytest.Config, items: list[pytest.Item], shard: str) -> None:
    index, count = (int(n) for n in shard.split("/"))
    files = sorted({str(i.fspath) for i in items if i.get_closest_marker("e2e")})
    mine = {f for n, f in enumerate(files) if n % count == index}
    dropped = [i for i in items if i.get_closest_marker("e2e") and str(i.fspath) not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


def _container_survivors(base: str) -> list[int]:
    """Live processes of this run's simulated containers: a VASTSIM_CONTAINER marker in their
    environment, and their environment or working directory under this run's basetemp."""
    needle, place = f"{MARKER}=".encode(), f"{base}/"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            cwd = os.readlink(f"/proc/{entry}/cwd")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        ours = place.encode() in environ or cwd.startswith(place)
        if needle in environ and ours and state != "Z":
            found.append(int(entry))
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_container_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Issue 14: when the run ends, no process of a container it started is alive (they are
    then killed, and the run fails with their pids and command lines)."""
    base = str(tmp_path_factory.getbasetemp().resolve())
    yield
    deadline = time.monotonic() + 10.0  # a destroy a moment ago may still be reaping
    while (left := _container_survivors(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = []
    for pid in left:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            lines.append(f"  {pid}: {argv.strip()[:200]}")
            os.kill(pid, signal.SIGKILL)
    assert not left, "container processes outlived the test run (now killed):\n" + "\n".join(lines)
