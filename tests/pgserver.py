"""A real PostgreSQL server for the tests: Debian's `postgresql` binaries, a cluster of our own.

`initdb` refuses to run as root, so as root the cluster is made and run as the `postgres` user
(`runuser`), in a directory of its own under the system temp dir (pytest's are private to root).
It listens on 127.0.0.1 (the test's network namespace has loopback only) on a free port, with
fsync off: the tests prove the store's logic, not the disk's. `.ci/run` installs the package; a
machine without it skips these tests and says why.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@dataclass
class PgServer:
    bindir: Path
    root: Path
    port: int
    user: str

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A PostgreSQL program as the server's owner."""
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=check)

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            " -c max_connections=300 -c shared_buffers=16MB"
        )
        self.run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        self.stop()
        self.start()

    def sql(self, statement: str, database: str = "postgres") -> str:
        psql = shutil.which("psql") or str(self.bindir / "psql")
        done = subprocess.run(
            [
                psql,
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                "-d",
                database,
                "-Atc",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    def new_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def running() -> Iterator[PgServer]:
    bindir = binaries()
    if bindir is None:
        pytest.skip("PostgreSQL's binaries are not installed (.ci/run installs `postgresql`)")
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.getuid()).pw_name
    root = Path(tempfile.mkdtemp(prefix="ray-vast-pg-"))
    os.chmod(root, 0o755)
    server = PgServer(bindir, root, _free_port(), user)
    if os.geteuid() == 0:
        shutil.chown(root, user)
    try:
        server.run("initdb", "-D", str(server.data), "-A", "trust", "-U", user, "--no-sync")
        server.start()  # `-w`: back once it takes connections
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
