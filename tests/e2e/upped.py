"""`ray-vast up` on the embedded simulator as every e2e test runs it, and what a test reads of it.

The fixture `upped` (tests/e2e/conftest.py) starts one `up` through `running_up`: a real process
with a state directory of the test's own, its output in a log file (a pipe nobody reads while
`up` runs could fill and stall it), every cluster's Ray head up before the test goes on. Afterwards,
whatever the test did, `up` is stopped, each cluster is taken `down`, and no process of the run is
left (the state directory's, each Ray head's): waited for on conditions with deadlines, never
slept for. A test that asserts on the ending (what `up` said when it stopped, what `down` said)
stops and downs through `Up` itself, and the fixture then finds nothing left to do.

With no spec, `up` runs the README's command as written (`examples/clusters/local-sim.yaml`, Ray
on 6380); `local_sim` makes copies of that example on free ports, for tests that need another
shape or more than one cluster.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from bench.live import describe, free_port, kill_leftovers, leftover_processes
from reconciler.embedded import rayhead
from tests.served import LOCAL_SIM
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
REVAST = (sys.executable, "-m", "reconciler")
EXAMPLE = "examples/clusters/local-sim.yaml"  # the README's command, as a user types it
EXAMPLE_RAY_PORT = 6380


@dataclass(frozen=True)
class Spec:
    """One cluster for `up`: its name, its spec file's text, and its Ray head's port."""

    name: str
    text: str
    ray_port: int
    dashboard_port: int = 8265


def local_sim(
    name: str = "local-sim",
    *,
    min_workers: int = 0,
    max_workers: int = 3,
    candidate_factor: int = 1,
    extra: str = "",
) -> Spec:
    """local-sim.yaml as `name`, its cpu node type within min/max with `candidate_factor`
    candidates per slot (one by default: two cores are few), $5/h, on free ports; `extra` is
    appended to its `spec:`."""
    ray_port, dashboard_port = free_port(), free_port()
    text = (
        LOCAL_SIM.read_text()
        .replace("name: local-sim", f"name: {name}")
        .replace("min_workers: 1 ", f"min_workers: {min_workers} ")
        .replace("max_workers: 2", f"max_workers: {max_workers}")
        .replace("candidate_factor: 2", f"candidate_factor: {candidate_factor}")
        .replace("max_dollars_per_hour: 1.00", "max_dollars_per_hour: 5.00")
        .replace(f"ray_port: {EXAMPLE_RAY_PORT}", f"ray_port: {ray_port}")
        .replace("enroll_port: 18443", f"enroll_port: {free_port()}")
        .replace("heartbeat_port: 18444", f"heartbeat_port: {free_port()}")
        .replace("metrics_port: 19464", f"metrics_port: {free_port()}")
        .replace("dashboard_port: 8265", f"dashboard_port: {dashboard_port}")
    )
    assert f"max_workers: {max_workers}" in text and f"name: {name}" in text, text
    assert f"min_workers: {min_workers} " in text, text
    assert f"candidate_factor: {candidate_factor}" in text, text
    return Spec(name, text.rstrip("\n") + "\n" + extra, ray_port, dashboard_port)


def base_env() -> dict[str, str]:
    """This environment without vast's, Ray's or CUDA's settings, the venv's tools first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAST_", "RAY_", "CUDA_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


# ray-vast's workers as Ray's GCS has them (dead ones too): a driver run against the head.
GCS_NODES = textwrap.dedent(
    """
    import json, sys
    from ray._raylet import GcsClient
    gcs = GcsClient(address=sys.argv[1])
    for node_id, node in gcs.get_all_node_info(timeout=30).items():
        if "rv_record" in node.labels:
            print("NODE", json.dumps({
                "id": node_id.hex(),
                "record": node.labels["rv_record"],
                "node_type": node.labels.get("rv_node_type"),
                "alive": node.state == 0,
                "death_reason": int(node.death_info.reason),
                "death_message": node.death_info.reason_message,
            }))
    """
)


@dataclass
class Up:
    """One running `ray-vast up` and what the test reads of it."""

    state: Path
    log: Path
    proc: subprocess.Popen[str]
    ports: dict[str, int]  # cluster -> its Ray head's port
    env: dict[str, str] = field(default_factory=base_env)
    dashboards: dict[str, int] = field(default_factory=dict)  # cluster -> its dashboard's port
    downed: set[str] = field(default_factory=set)

    def address(self, cluster: str = "local-sim") -> str:
        return f"127.0.0.1:{self.ports[cluster]}"

    def dashboard(self, cluster: str = "local-sim") -> str:
        """The URL of the cluster's Ray dashboard and Jobs API."""
        return f"http://127.0.0.1:{self.dashboards.get(cluster, 8265)}"

    def token(self, cluster: str = "local-sim") -> Path:
        return self.state / "pki" / cluster / "ray-auth-token"

    def ray_env(self, cluster: str = "local-sim") -> dict[str, str]:
        token = str(self.token(cluster))
        return {**self.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token}

    def ray_status(self, cluster: str = "local-sim") -> subprocess.CompletedProcess[str] | None:
        """`ray status` of the cluster's head, once `up` has written its Ray token."""
        if not self.token(cluster).exists():
            return None
        return subprocess.run(
            [RAY, "status", "--address", self.address(cluster)],
            env=self.ray_env(cluster),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def head_up(self, cluster: str = "local-sim") -> bool:
        """`ray status` answers and so does the dashboard (`up` starts both)."""
        shown = self.ray_status(cluster)
        if shown is None or shown.returncode != 0:
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.dashboards.get(cluster, 8265)), 2):
                return True
        except OSError:
            return False

    def worker_in_ray_status(self, cluster: str = "local-sim") -> str | None:
        """`ray status` once a worker of ray-vast's (its slot resource) is in it."""
        shown = self.ray_status(cluster)
        return shown.stdout if shown is not None and "rv-slot-" in shown.stdout else None

    def records(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.state / "state.json").read_text())["records"])
        except (OSError, ValueError, KeyError):
            return {}

    def instances(self, cluster: str) -> list[dict[str, Any]]:
        return [r for r in self.records().get("instances", {}).values() if r["cluster"] == cluster]

    def requests(self, cluster: str) -> list[dict[str, Any]]:
        found = [r for r in self.records().get("requests", {}).values() if r["cluster"] == cluster]
        return sorted(found, key=lambda r: r["placed_at"])

    def serving(self, cluster: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self.instances(cluster)
            if r.get("role") == "worker"
            and r.get("intent") == "running"
            and r.get("phase") != "destroyed"
        ]

    def ledger(self) -> list[dict[str, Any]]:
        try:
            text = (self.state / "ledger.jsonl").read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written
        return out

    def ended_workers(self, cluster: str) -> int:
        """Workers whose agent reported their end (e.g. Ray's start timed out on 2 cores)."""
        return sum(
            1
            for e in self.ledger()
            if e.get("cluster") == cluster
            and e["class"] == "worker_report"
            and "(worker)" in e["message"]
        )

    def said(self) -> str:
        """The story for a failure: the ledger's decisions and detections, each Ray head's log
        and up's."""
        story = "\n".join(
            f"{e['time']:.1f} {e.get('cluster')} {e['kind']} {e['class']} {e.get('record')}: "
            f"{e['message'][:140]}"
            for e in self.ledger()
            if e["kind"] in ("decision", "detection", "call") or e["class"] in ("enrolled",)
        )
        heads = []
        for cluster in self.ports:
            log = self.state / "ray" / f"{cluster}-head.log"
            heads.append(log.read_text()[-2000:] if log.exists() else f"(no head log of {cluster})")
        said = self.log.read_text()[-6000:] if self.log.exists() else ""
        return f"ledger:\n{story}\n" + "\n".join(heads) + f"\nup said:\n{said}"

    def driver(
        self, cluster: str, script: str, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """`script` run against the cluster's Ray (its address as the first argument)."""
        return subprocess.run(
            [sys.executable, "-c", script, self.address(cluster)],
            env=self.ray_env(cluster),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ray_workers(self, cluster: str) -> list[dict[str, Any]]:
        """ray-vast's workers as Ray's GCS has them, dead ones too."""
        shown = self.driver(cluster, GCS_NODES, timeout=90)
        return [json.loads(line[5:]) for line in shown.stdout.splitlines() if line[:5] == "NODE "]

    def status(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._revast("status", *args, timeout=120)

    def stop(self) -> str:
        """Stop `up` (SIGTERM, as a person's Ctrl-C ends watching; killed if it hangs) and return
        all it said."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.log.read_text() if self.log.exists() else ""

    def down(self, cluster: str = "local-sim") -> subprocess.CompletedProcess[str]:
        """`ray-vast down CLUSTER --auto-approve` (the fixture downs no cluster twice)."""
        self.downed.add(cluster)
        return self._revast("down", cluster, "--auto-approve", timeout=180)

    def nothing_left(self) -> None:
        """No process of the run is alive: none that names the state directory or a Ray head's
        (those found at the deadline are killed, and named in the failure)."""
        markers = [str(self.state)] + [
            str(rayhead.temp_dir(self.state, cluster)) for cluster in self.ports
        ]
        for marker in markers:
            try:
                wait_for(partial(_nothing_of, marker), 60, f"nothing of {marker}")
            except AssertionError:
                left = describe(leftover_processes(marker))
                kill_leftovers(marker)
                raise AssertionError(left) from None

    def _revast(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*REVAST, *args, "--state-dir", str(self.state)],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _nothing_of(marker: str) -> bool:
    return leftover_processes(marker) == []


class UpCluster(Protocol):
    """The fixture `upped`: `up` on these clusters (none: the README's example), heads up."""

    def __call__(self, *specs: Spec) -> Up: ...


def _spec_path(where: Path, specs: Sequence[Spec]) -> str:
    """What `up` is given: the example itself, one file, or a directory of one file each."""
    if not specs:
        return EXAMPLE
    if len(specs) == 1:
        (spec,) = specs
        path = where / f"{spec.name}.yaml"
        path.write_text(spec.text)
        return str(path)
    path = where / "clusters"
    path.mkdir()
    for spec in specs:
        (path / f"{spec.name}.yaml").write_text(spec.text)
    return str(path)


@contextmanager
def running_up(
    where: Path,
    specs: Sequence[Spec] = (),
    *,
    env_extra: Mapping[str, str] | None = None,
    wait_heads: bool = True,
) -> Iterator[Up]:
    """`ray-vast up` on these clusters under `where`, every Ray head up; afterwards `up` stopped,
    `down` of each cluster the test did not take down itself, and no process of it left.
    `env_extra`: more of `up`'s environment (a benchmark's PYTHONPATH to another checkout).
    `wait_heads=False`: yield at once (a benchmark timing the start itself, whose `ray status`
    looks every 2 s would take a core from the start it measures)."""
    state, log = where / "state", where / "up.log"
    env = {**base_env(), **(env_extra or {})}
    path = _spec_path(where, specs)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*REVAST, "up", path, "--state-dir", str(state)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    ports = {s.name: s.ray_port for s in specs} or {"local-sim": EXAMPLE_RAY_PORT}
    up = Up(state, log, proc, ports, env, {s.name: s.dashboard_port for s in specs})
    try:
        for name in ports if wait_heads else ():
            try:
                wait_for(partial(up.head_up, name), 180, f"the Ray head of {name}", every=2)
            except AssertionError:
                raise AssertionError(f"the Ray head of {name} is not up\n{up.said()}") from None
        yield up
    finally:
        up.stop()
        downs = [up.down(name) for name in ports if name not in up.downed]
        try:
            up.nothing_left()
        finally:
            for ended in downs:
                assert ended.returncode == 0, ended.stdout + ended.stderr


class Peak:
    """The most serving workers of each cluster seen at once, sampled every half second."""

    def __init__(self, up: Up) -> None:
        self.up = up
        self.seen: dict[str, int] = dict.fromkeys(up.ports, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for cluster in self.seen:
                self.seen[cluster] = max(self.seen[cluster], len(self.up.serving(cluster)))
