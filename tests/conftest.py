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
# RAY_VAST_E2E_SHARD=i/n keeps lane i's share of the e2e files: the files are dealt out longest
# first, each to the lane with the least time so far (the times below, from `.ci/run`'s
# `--durations=0` at 4571440, in seconds; a file not listed counts as E2E_UNKNOWN_SECONDS).
# Dealt in sorted order one by one, the two lanes took 780 s and 258 s.
E2E_SECONDS = {
    "test_ray_autoscaling_live.py": 210.8,
    "test_runner_faults.py": 154.6,
    "test_deliberate_stop_live.py": 151.6,
    "test_live_seed.py": 114.7,
    "test_ray_head.py": 62.3,
    "test_ray_packing_live.py": 62.1,
    "test_simulated_gpu.py": 48.4,
    "test_up_readme.py": 33.0,
    "test_pipeline.py": 26.2,
    "test_interrupts.py": 25.2,
    "test_shared_state.py": 22.8,
    "test_crash.py": 16.8,
    "test_no_ray_left.py": 15.2,
    "test_plan_apply_down.py": 14.5,
    "test_saved_plans_and_locks.py": 13.5,
    "test_watch_git_status.py": 13.3,
    "test_reload_enrolls.py": 8.8,
    "test_watch_and_ci.py": 7.3,
    "test_standby_watch.py": 5.8,
    "test_container_cpu_live.py": 1.8,
}
E2E_UNKNOWN_SECONDS = 30.0
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
    mine = set(deal(files, count)[index])
    dropped = [i for i in items if i.get_closest_marker("e2e") and str(i.fspath) not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


def deal(files: list[str], count: int) -> list[list[str]]:
    """The files in `count` lanes of about equal time: longest first, each to the lane with the
    least so far (ties to the first lane; the same for every lane's own run)."""
    lanes: list[list[str]] = [[] for _ in range(count)]
    totals = [0.0] * count
    weight = {f: E2E_SECONDS.get(Path(f).name, E2E_UNKNOWN_SECONDS) for f in files}
    for name in sorted(files, key=lambda f: (-weight[f], f)):
        lane = min(range(count), key=lambda n: (totals[n], n))
        lanes[lane].append(name)
        totals[lane] += weight[name]
    return lanes


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
