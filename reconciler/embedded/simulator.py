"""The embedded vast.ai: `python -m vastsim serve` with the process runner, run in the background.

Its containers are local processes that run the real bootloader and agent, so their PATH leads to
this Python's environment (for `ray`). The key is local to this simulator and kept 0600 in the
state directory; it is not a vast.ai key.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.embedded import processes

NAME = "vastsim"


@dataclass(frozen=True)
class Simulator:
    url: str
    api_key: str
    pid: int

    def env(self) -> dict[str, str]:
        """What the vast client needs to talk to it (VAST_URL, VAST_API_KEY)."""
        return {"VAST_URL": self.url, "VAST_API_KEY": self.api_key, "RAY_VAST_PACING": "off"}


def running(state_dir: Path) -> Simulator | None:
    found = processes.records(state_dir).get(NAME)
    if found is None or not processes.alive(found.pid):
        return None
    sim = Simulator(str(found.info["url"]), str(found.info["api_key"]), found.pid)
    return sim if _answers(sim.url) else None


def start(state_dir: Path, *, env: Mapping[str, str], market: str | None = None) -> Simulator:
    """The running simulator of this state directory, or a new one."""
    current = running(state_dir)
    if current is not None:
        return current
    key = secrets.token_urlsafe(24)
    workdir = state_dir / "vastsim"
    log = workdir / "vastsim.log"
    argv = [
        sys.executable,
        "-m",
        "vastsim",
        "serve",
        "--port",
        "0",
        f"--api-key={key}",  # one word: a key may begin with "-" (token_urlsafe), 1 in 32
        "--runner",
        "process",
        "--workdir",
        str(workdir / "containers"),
        "--timing",
        "fast",
    ]
    if market:
        argv += ["--market", market]
    path = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "/usr/bin:/bin")])
    proc = processes.spawn(argv, env={**env, "PATH": path}, log=log)
    line = processes.wait_for_line(log, "vastsim listening on ", proc, timeout=60)
    url = line.split("vastsim listening on ", 1)[1].strip()
    processes.remember(state_dir, processes.Started(NAME, proc.pid, {"url": url, "api_key": key}))
    return Simulator(url, key, proc.pid)


def stop(state_dir: Path) -> bool:
    found = processes.records(state_dir).get(NAME)
    if found is None:
        return False
    processes.stop_group(found.pid)
    processes.forget(state_dir, NAME)
    return True


def _answers(url: str) -> bool:
    """Something listens where the simulator was recorded (a TCP connect, no request)."""
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), 3):
            return True
    except OSError:
        return False
