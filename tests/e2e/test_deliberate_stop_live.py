"""A deliberate stop keeps the disk, end to end with real processes (issue 16's acceptance).

vastsim runs each container as a process in a PID namespace of its own (the real bootloader and
agent as PID 1, a real Ray worker), a real token-authenticated Ray head, the real watch loop and
the head's TLS services (`bench.live`), the money chain on short timers (stop after 15 s of
quiet, destroy after 100 s) and Ray's demand from a driver's one-CPU tasks. The story:

1. a task: a worker is rented, runs it, goes quiet, and is stopped: the head first asks the agent
   (its heartbeat answer says "stop pending", DESIGN.md 11) and, once the agent acknowledged,
   drains the node through Ray (whose raylet then exits: part of the stop for the agent) and
   calls vast's stop; vast says stopped and bills storage only, the agent reported the TERM and
   the head answered "deliberate stop", PID 1 exited without destroying, the certificate and key
   are on the instance's disk;
2. another task: the head starts the same instance (no new rental, no pull), the agent resumes
   with its kept certificate over mutual TLS instead of enrolling, its Ray node runs the task;
3. quiet for longer: stopped again, then destroyed by the destroy timer (the head's call);
4. a new worker's container restarts unexpectedly (PID 1 killed): the head refuses the second
   enrollment and the instance ends.

Needs a loopback-only network namespace (`.ci/run` provides one).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.live import Live, leftover_processes, live_cluster
from tests.e2e.test_live_seed import loopback_only
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not loopback_only(),
        reason="needs a loopback-only network namespace (run under `unshare -n`, as .ci/run does)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
STOP, DESTROY = 15, 100  # seconds of quiet before the money chain's stop and destroy
DRIVER = textwrap.dedent(
    """
    import os, sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1, max_retries=0)
    def hold(seconds):
        time.sleep(seconds)
        return os.environ["CONTAINER_ID"]

    print("RAN ON", ray.get(hold.remote(float(sys.argv[2])), timeout=600), flush=True)
    """
)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("keep")
    with live_cluster(
        root, min_workers=0, factor=1, gives_up=30, silent=30, money_chain=(STOP, DESTROY), cpus=1
    ) as cluster:
        yield cluster
    assert leftover_processes(str(root)) == []


def driver(live: Live, seconds: float) -> subprocess.Popen[str]:
    """A Ray driver with one task of one CPU (the head has none: it is demand)."""
    spec = live.controller.specs["live"]
    token = live.state_dir / "pki" / "live" / "ray-auth-token"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VAST_", "RAY_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    address = f"127.0.0.1:{spec.head.ray_port}"
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, address, str(seconds)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ran_on(process: subprocess.Popen[str]) -> int:
    out, _ = process.communicate(timeout=600)
    assert "RAN ON" in out, out
    return int(out.rsplit("RAN ON", 1)[1].split()[0])


def record_of(live: Live, vast_id: int) -> Any:
    return next(r for r in live.records().instances.values() if r.vast_id == vast_id)


def entries(live: Live, vast_id: int, cls: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in live.ledger()
        if e["instance"] == vast_id and e["class"] == cls and (kind is None or e["kind"] == kind)
    ]


def identity_file(live: Live, vast_id: int) -> Path:
    # the container's DATA_DIRECTORY is its workspace: the instance's disk
    return live.workdir / str(vast_id) / "workspace" / ".ray-vast" / "identity.json"


def rentals(live: Live) -> set[int]:
    return set(live.sim.instances) | set(live.sim.fleet.gone)


def status(live: Live, vast_id: int) -> str | None:
    inst = live.sim.instance(vast_id)
    return None if inst is None or inst.destroyed_at is not None else inst.actual_status


def container_log(live: Live, vast_id: int) -> str:
    return (live.workdir / str(vast_id) / "container.log").read_text()


def story(live: Live) -> str:
    return "\n".join(
        f"{e['time']:.1f} {e['kind']} {e['class']} {e.get('instance')}: {e['message'][:140]}"
        for e in live.ledger()
        if e["class"] not in ("heartbeat_refused", "tls_refused")
    )


def _stopped_with_its_disk_kept(live: Live, vast_id: int) -> None:
    """Quiet, the worker is stopped through the handshake; its agent exits without destroying,
    its identity and disk kept, and vast bills storage only."""
    wait_for(lambda: status(live, vast_id) == "stopped", STOP + 90)
    # vast says stopped at once; the agent's report and its answer follow within docker's grace
    wait_for(
        lambda: (
            entries(live, vast_id, "deliberate_stop") or entries(live, vast_id, "worker_report")
        ),
        30,
    )
    record = record_of(live, vast_id)
    assert record.intent.value == "stopped" and record.stopped_deliberately_at is not None, (
        story(live) + "\n" + container_log(live, vast_id)
    )
    [kept] = entries(live, vast_id, "deliberate_stop")
    assert kept["data"]["reason"] == "signal" and kept["data"]["trusted"] is True
    assert entries(live, vast_id, "worker_report") == []  # no ending was reported
    # the handshake came first: asked, acknowledged by the agent, then drained and stopped
    [asked] = entries(live, vast_id, "stop_pending")
    [acked] = entries(live, vast_id, "stop_acknowledged")
    [call] = entries(live, vast_id, "idle_stop", "call")
    assert asked["time"] <= acked["time"] <= call["time"] <= kept["time"], story(live)
    # the agent stops Ray, keeps its identity and exits: the container is gone, its disk kept
    wait_for(lambda: live.sim.runner.pids(vast_id) == [], 30)  # type: ignore[attr-defined]
    saved = json.loads(identity_file(live, vast_id).read_text())
    assert saved["instance_id"] == vast_id
    assert saved["identity"]["certificate"]["key_pem"].startswith("-----BEGIN PRIVATE KEY")
    assert identity_file(live, vast_id).stat().st_mode & 0o077 == 0  # the container's alone
    inst = live.sim.instance(vast_id)
    assert inst is not None
    assert live.sim.meter.rate(vast_id) == inst.storage_dph  # storage only
    log = (live.workdir / str(vast_id) / "container.log").read_text()
    assert "PID 1 exits (0) without destroying" in log
    deletes = [r for r in live.sim.requests if r.method == "DELETE" and str(vast_id) in r.path]
    assert deletes == []  # the agent never destroyed its instance


def test_quiet_stop_keeps_the_disk_demand_resumes_it_longer_quiet_destroys_it(live: Live) -> None:
    # --- 1. a task rents a worker; quiet, it is stopped with its disk kept -----------------
    vast_id = ran_on(driver(live, 5))
    _stopped_with_its_disk_kept(live, vast_id)
    stopped_at = time.time()
    rented = rentals(live)

    # --- 2. another task: the same instance starts again and its agent resumes --------------
    assert ran_on(driver(live, 5)) == vast_id, story(live)
    assert rentals(live) == rented  # no new rental
    [start] = entries(live, vast_id, "resume", "decision")
    assert float(start["time"]) > stopped_at - 5
    [resumed] = entries(live, vast_id, "resumed")
    assert resumed["data"]["again"] is False
    log = (live.workdir / str(vast_id) / "container.log").read_text()
    assert "resumed as" in log and log.count("enrolled as") == 1  # one enrollment, ever
    assert not identity_file(live, vast_id).exists()  # it served its one resume
    loading = [
        s
        for s in live.sim.meter.segments(vast_id)
        if s.status == "loading" and s.start >= float(start["time"]) - 1
    ]
    assert loading and all((s.end or time.time()) - s.start < 5 for s in loading)  # no pull

    # --- 3. quiet for longer: stopped again, then destroyed by the destroy timer ------------
    wait_for(lambda: vast_id not in live.sim.instances, DESTROY + 120)
    assert len(entries(live, vast_id, "idle_destroy", "call")) == 1, story(live)
    assert len(entries(live, vast_id, "deliberate_stop")) == 2
    assert len(entries(live, vast_id, "stop_acknowledged")) == 2

    def deleted() -> list[str]:  # the request log is written after the instance is gone
        return [
            r.identity for r in live.sim.requests if r.method == "DELETE" and str(vast_id) in r.path
        ]

    assert wait_for(deleted, 10) == ["account"]  # the head's destroy
    assert rentals(live) == rented


def test_an_unexpected_container_restart_is_still_refused_and_ends_the_instance(
    live: Live,
) -> None:
    before = rentals(live)
    task = driver(live, 300)
    try:

        def serving() -> int | None:
            found = [v for v in live.workers().values() if v not in before]
            ok = [v for v in found if record_of(live, v).phase.value == "serving"]
            return ok[0] if ok else None

        vast_id: int = wait_for(serving, 180, every=0.5)
        pid = live.sim.runner.pid(vast_id)  # type: ignore[attr-defined]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # PID 1 crashes: vast starts the container again
        wait_for(lambda: vast_id not in live.sim.instances, 90)
        refused = [e for e in live.ledger() if e["instance"] == vast_id]
        assert any("second_enrollment" in str(e) for e in refused), story(live)
        assert entries(live, vast_id, "resumed") == []
    finally:
        task.kill()
        task.communicate(timeout=30)
