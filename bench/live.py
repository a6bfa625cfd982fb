"""A live cluster on one machine: real processes end to end, for the seed's live tests.

vastsim serves the vast API on a real socket and runs each container as a local process group
(the real bootloader and agent as PID 1), a real Ray head runs with token auth, and the real watch
loop (controller, head services over TLS, Ray's signals) runs in a thread. Used by
`tests/e2e/test_live_seed.py` and `bench/lifecycle.py`. Ray binds 127.0.0.1 only inside a
loopback-only network namespace (reference ray.md), so callers run under `unshare -n`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.applying.journal import Journal
from reconciler.applying.launch import Launcher
from reconciler.clock import SystemClock
from reconciler.deps import Deps
from reconciler.embedded import rayhead
from reconciler.head.service import HeadService
from reconciler.model.records import Records
from reconciler.spec.loader import load
from reconciler.spec.text import spec_yaml
from reconciler.watch.controller import Controller
from reconciler.watch.headside import HeadServices, cluster_pki, head_extension
from reconciler.watch.raysignals import RaySignals
from reconciler.watch.runner import Service, WatchOptions, watch
from reconciler.watch.source import SpecSource
from tests.waiting import wait_for
from vastsim import ProcessRunner, RealClock, Sim, Timing, serve

API_KEY = "live-account-key-31c9e0"
# Quick detection of dead Ray nodes, and no 30 s drain on stop (reference ray.md section 3).
RAY_TEST_ENV = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}

# The fields under `spec:` (reconciler.spec.text.spec_yaml writes the header).
SPEC = """\
  provider: {{type: vastsim}}
  head:
    address: 127.0.0.1
    ray_port: {ray_port}
    enroll_port: {enroll_port}
    heartbeat_port: {heartbeat_port}
    metrics_port: {metrics_port}
  max_dollars_per_hour: 2
  node_types:
    cpu:
      min_workers: {min_workers}
      max_workers: 3
      candidate_factor: {factor}
      image: rayproject/ray:2.60.0-py311-cpu
      disk_gb: 10
      offer:
        filters: {{num_gpus: {{eq: 1}}}}{resources}
  watchdogs:
    heartbeat_interval_seconds: 2
    worker_gives_up_after_seconds: {gives_up}
    went_silent_after_seconds: {silent}
    enrollment_limit_seconds: 60
    candidate_self_destroy_seconds: 120
    report_wait_seconds: 3
    self_destroy_retry_seconds: 1
    idle_stop_after_seconds: {idle_stop}
    idle_destroy_after_seconds: {idle_destroy}
  cadences:
    reconcile_seconds: 2
    went_silent_seconds: 1
    boot_failure_seconds: 5
    lost_seconds: 2
    idle_scan_seconds: {idle_cadence}
    auto_stop_seconds: {idle_cadence}
    auto_destroy_seconds: {idle_cadence}
  testing: {{allow_short_thresholds: true}}
"""


def spec_text(
    name: str,
    *,
    min_workers: int = 1,
    factor: int = 2,
    gives_up: int = 12,
    silent: int = 12,
    money_chain: tuple[int, int] | None = None,
    cpus: int | None = None,
) -> str:
    """A live cluster's spec, on free ports of its own. `money_chain`: (stop, destroy) seconds of
    quiet, scanned every second; without it the chain runs at its defaults every 10 minutes.
    `cpus`: the node type declares that many CPUs (so Ray's demand packs onto it)."""
    idle_stop, idle_destroy = money_chain or (600, 1800)
    resources = f"\n      resources: {{CPU: {cpus}}}" if cpus is not None else ""
    return spec_yaml(
        name,
        SPEC.format(
            ray_port=free_port(),
            enroll_port=free_port(),
            heartbeat_port=free_port(),
            metrics_port=free_port(),
            min_workers=min_workers,
            factor=factor,
            gives_up=gives_up,
            silent=silent,
            idle_stop=idle_stop,
            idle_destroy=idle_destroy,
            idle_cadence=1 if money_chain else 600,
            resources=resources,
        ),
    )


# Ports a test hands to a process that binds them seconds later: below the kernel's ephemeral
# range (which the kernel gives to outgoing connections and to every `bind(0)`, Ray's many
# servers included) and above Ray's default worker ports (10002-19999), so nothing else is handed
# the same port meanwhile. A port from `bind(0)` was taken before `up` bound it (a CI run:
# "OSError: [Errno 98] Address already in use" for the head's TLS port).
LISTEN_PORTS = range(20000, 32000)
_picked: set[int] = set()


def free_port() -> int:
    """A port free now that no other `free_port` of this process has given, from `LISTEN_PORTS`
    (a random start, so parallel runs rarely meet)."""
    start = secrets.randbelow(len(LISTEN_PORTS))
    for k in range(len(LISTEN_PORTS)):
        port = LISTEN_PORTS[(start + k) % len(LISTEN_PORTS)]
        if port in _picked:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _picked.add(port)
        return port
    raise RuntimeError(f"no free port in {LISTEN_PORTS}")


@dataclass
class Live:
    stop_watch: Callable[[], None]
    sim: Sim
    url: str
    state_dir: Path
    workdir: Path
    controller: Controller
    services: list[Service]
    signals: RaySignals
    log: io.StringIO
    specs: Path  # the spec directory (watch reads it when `in_directory`)
    started: float = field(default_factory=time.monotonic)

    @property
    def head(self) -> HeadService:
        heads = self.services[0]
        assert isinstance(heads, HeadServices)
        (service,) = heads.services.values()
        return service

    def records(self) -> Records:
        return self.controller.records()

    def workers(self) -> dict[str, int]:
        """Serving workers: record id -> vast id."""
        return {
            r.id: r.vast_id
            for r in self.records().instances.values()
            if r.role.value == "worker" and r.live and r.intent.value == "running" and r.vast_id
        }

    def ray_nodes(self) -> list[dict[str, Any]]:
        """Every Ray node the head's GCS knows: state, labels, death reason."""
        nodes = self.signals._gcs().get_all_node_info(timeout=5)
        return [
            {
                "alive": n.state == 0,
                "labels": dict(n.labels),
                "instance_id": n.instance_id,
                "death": n.death_info.reason_message,
            }
            for n in nodes.values()
        ]

    def ledger(self) -> list[dict[str, Any]]:
        import json  # noqa: PLC0415

        path = self.state_dir / "ledger.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def leftover_processes(marker: str) -> list[int]:
    """Live processes whose command line or environment mentions `marker` (a test's directory:
    containers and their Ray workers carry it in HOME and DATA_DIRECTORY)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in seen and state != "Z":
            found.append(int(entry.name))
    return found


def describe(pids: list[int]) -> str:
    """What leftover processes are, for a failure message."""
    lines = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        lines.append(f"{pid}: {cmdline.decode(errors='replace')[:160]}")
    return "\n".join(lines)


def kill_leftovers(marker: str) -> None:
    for pid in leftover_processes(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def live_cluster(
    root: Path,
    *,
    min_workers: int = 1,
    factor: int = 2,
    gives_up: int = 12,
    silent: int = 12,
    agent_env: dict[str, str] | None = None,
    read_ray: bool = True,
    in_directory: bool = False,
    money_chain: tuple[int, int] | None = None,
    cpus: int | None = None,
) -> Iterator[Live]:
    """`read_ray`: Ray reads its auth token once per process, so only the first cluster of a
    process can be read through Ray; later ones run without Ray's signals. `in_directory`: the
    spec is a file of the directory `Live.specs` that watch reads (a test adds clusters to it).
    `money_chain`: the idle stop and destroy after these seconds of quiet; `cpus`: the CPUs the
    node type declares (`spec_text`)."""
    root.mkdir(parents=True, exist_ok=True)
    state_dir, workdir = root / "state", root / "containers"
    specs = root / "specs"
    specs.mkdir(exist_ok=True)
    spec_file = (specs if in_directory else root) / "live.yaml"
    spec_file.write_text(
        spec_text(
            "live",
            min_workers=min_workers,
            factor=factor,
            gives_up=gives_up,
            silent=silent,
            money_chain=money_chain,
            cpus=cpus,
        )
    )
    (spec,) = load(spec_file).clusters
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    base_env = {"PATH": path, "LANG": "C.UTF-8", "HOME": str(root), **RAY_TEST_ENV}
    sim = Sim(
        clock=RealClock(),
        api_key=API_KEY,
        runner=ProcessRunner(workdir, base_env=base_env, stop_grace=5.0),
        timing=Timing.fast(),
    )
    log = io.StringIO()
    logger = logging.getLogger("ray_vast.live")
    head_log = logging.getLogger("reconciler.head")  # the head's log: reports and refusals
    with _capturing(log, logger, head_log), serve(sim) as server:
        env = {
            **base_env,
            "VAST_URL": server.url,
            "VAST_API_KEY": API_KEY,
            "RAY_VAST_PACING": "off",
        }
        deps = Deps(
            clock=SystemClock(),
            env=env,
            state_dir=state_dir,
            out=log,
            err=log,
            interactive=False,
            ask=lambda prompt: "",
        )
        pki = cluster_pki(state_dir, spec, time.time())
        rayhead.start(
            state_dir,
            spec.name,
            port=spec.head.ray_port,
            token_path=pki.ray_auth_token_path,
            env=env,
        )
        token = str(pki.ray_auth_token_path) if read_ray else None
        signals = RaySignals(f"127.0.0.1:{spec.head.ray_port}", spec.name, token_path=token)
        built = head_extension(
            state_dir=state_dir,
            clock=deps.clock,
            vast_url=server.url,
            secrets=(API_KEY,),
            agent_env=agent_env,
        )
        captured: dict[str, Any] = {}

        def extension(controller: Controller, journal: Journal) -> tuple[Launcher, list[Service]]:
            launcher, services = built(controller, journal)
            captured.update(controller=controller, services=services)
            return launcher, services

        stop = threading.Event()
        options = WatchOptions(
            source=SpecSource(specs if in_directory else spec_file),
            signals=signals if read_ray else None,
            extension=extension,
            stop=stop,
            metrics=False,
        )
        thread = threading.Thread(target=watch, args=(deps, options, logger), daemon=True)
        thread.start()

        def stop_watch() -> None:
            stop.set()
            thread.join(timeout=60)

        try:
            wait_for(lambda: "services" in captured, 60)
            yield Live(
                stop_watch,
                sim,
                server.url,
                state_dir,
                workdir,
                captured["controller"],
                captured["services"],
                signals,
                log,
                specs,
            )
        finally:
            stop_watch()
            rayhead.stop(state_dir, spec.name)
            sim.shutdown()
    kill_leftovers(str(root))


@contextlib.contextmanager
def _capturing(stream: io.StringIO, *loggers: logging.Logger) -> Iterator[None]:
    """Send these loggers to `stream` only, for as long as the live cluster runs; then put them
    back as they were (they are process-wide: a later test must find them untouched)."""
    before = [(each, list(each.handlers), each.level, each.propagate) for each in loggers]
    for each in loggers:
        each.handlers = [logging.StreamHandler(stream)]
        each.setLevel(logging.INFO)
        each.propagate = False
    try:
        yield
    finally:
        for each, handlers, level, propagate in before:
            each.handlers = handlers
            each.setLevel(level)
            each.propagate = propagate
