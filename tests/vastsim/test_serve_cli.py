"""`python -m vastsim serve`: one ready line, an API on the port, and a clean end on SIGTERM
or SIGINT (every instance destroyed, every container process killed)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.waiting import wait_for

from .test_process_runner import alive

KEY = "cli-key"


def start_server(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vastsim", "serve", "--port", "0", "--api-key", KEY, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def ready_url(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the server printed nothing"
    line = proc.stdout.readline()
    assert line.startswith("vastsim listening on http://127.0.0.1:"), line
    return line.split()[-1]


@pytest.fixture
def server_process() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_its_url_and_stops_on_signal(
    server_process: list[subprocess.Popen[str]], sig: signal.Signals
) -> None:
    proc = start_server("--admin-key", "adm")
    server_process.append(proc)
    url = ready_url(proc)
    names = httpx.get(f"{url}/api/v0/gpu_names/unique/")
    assert names.headers["content-type"] == "application/json"
    assert "RTX 4090" in names.json()["gpu_names"]
    denied = httpx.get(f"{url}/api/v1/instances/", headers={"Authorization": "Bearer nope"})
    assert denied.status_code == 401
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 0


def test_serve_with_process_runner_kills_containers_on_sigterm(
    server_process: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    proc = start_server("--runner", "process", "--workdir", str(tmp_path), "--timing", "fast")
    server_process.append(proc)
    url = ready_url(proc)
    auth = {"Authorization": f"Bearer {KEY}"}
    offers = httpx.post(
        f"{url}/api/v0/bundles/",
        json={"cpu_cores": {"gte": 8}, "dph_total": {"lt": 0.1}, "order": [["dph_total", "asc"]]},
        headers=auth,
    ).json()["offers"]
    assert offers
    script = "import os; open('pid', 'w').write(str(os.getpid())); import time; time.sleep(1000)"
    body = {
        "image": "rayproject/ray:2.60.0-py311-cpu",
        "runtype": "args",
        "args": [sys.executable, "-c", script],
    }
    created = httpx.put(f"{url}/api/v0/asks/{offers[0]['id']}/", json=body, headers=auth)
    instance_id = created.json()["new_contract"]
    workspace = tmp_path / str(instance_id) / "workspace"
    wait_for(lambda: (workspace / "pid").exists() and (workspace / "pid").read_text())
    # the pid it wrote is its own namespace's (1); the host's is found by its working directory
    [pid] = wait_for(lambda: working_in(workspace))
    assert alive(pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not alive(pid)  # the server killed the container before it exited


def working_in(directory: Path) -> list[int]:
    """Live processes whose working directory is `directory`, host pids, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if Path(cwd) == directory.resolve() and alive(int(entry.name)):
            found.append(int(entry.name))
    return found
