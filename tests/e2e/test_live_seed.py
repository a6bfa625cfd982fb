"""The first seed's live tests, reproduced on one machine with real Ray and real processes.

vastsim runs each container as a process group whose PID 1 is the real bootloader and agent; the
agent starts a real Ray worker that joins a real, token-authenticated Ray head; the watch loop and
the head's TLS services run as they do in `ray-vast up`. Thresholds are shrunk (heartbeat 2 s,
give up / went silent 12 s). Needs a loopback-only network namespace (`.ci/run` provides one).
In every case the ledger and the head's log must hold the reason.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.live import API_KEY, Live, leftover_processes, live_cluster
from reconciler.embedded import rayhead
from tests.waiting import wait_for


def loopback_only() -> bool:
    """Ray binds 127.0.0.1 only when no route leads off the machine (reference ray.md)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a UDP connect sends nothing
        except OSError:
            return True
    return False


pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not loopback_only(),
        reason="needs a loopback-only network namespace (run under `unshare -n`, as .ci/run does)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("live")
    # went silent / gives up after 30 s: a restart under a loaded CI machine must not look silent
    with live_cluster(root, min_workers=1, factor=2, gives_up=30, silent=30) as cluster:
        yield cluster
    assert leftover_processes(str(root)) == []


def serving(live: Live) -> tuple[str, int]:
    """A serving worker whose Ray node is alive: (record id, vast id)."""

    def ready() -> tuple[str, int] | None:
        alive = {n["labels"].get("rv_record") for n in live.ray_nodes() if n["alive"]}
        return next(((r, v) for r, v in live.workers().items() if r in alive), None)

    found: tuple[str, int] = wait_for(ready, 120, every=0.2)
    return found


def gone(live: Live, vast_id: int) -> bool:
    return vast_id not in live.sim.instances


def entries(live: Live, vast_id: int, cls: str | None = None) -> list[dict[str, object]]:
    return [
        e for e in live.ledger() if e["instance"] == vast_id and (cls is None or e["class"] == cls)
    ]


def node_dead(live: Live, record: str) -> bool:
    nodes = [n for n in live.ray_nodes() if n["labels"].get("rv_record") == record]
    return bool(nodes) and not any(n["alive"] for n in nodes)


def test_1_one_slot_two_candidates_one_worker_matched_to_its_slot(live: Live) -> None:
    record, vast_id = serving(live)
    (node,) = [n for n in live.ray_nodes() if n["labels"].get("rv_record") == record and n["alive"]]
    slot = live.records().instances[record].slot_id
    assert node["labels"]["rv_slot"] == slot and node["instance_id"] == str(vast_id)
    extras = [
        e for e in live.ledger() if e["class"] == "extra_candidate" and e["kind"] == "outcome"
    ]
    assert len(extras) == 1, "the other candidate was not destroyed"
    extra = int(extras[0]["instance"])  # type: ignore[call-overload]
    wait_for(lambda: gone(live, extra), 30)
    enrolled = next(
        e for e in live.ledger() if e["class"] == "enrolled" and e["instance"] == vast_id
    )
    ended = live.sim.instance(extra).destroyed_at  # type: ignore[union-attr]
    assert ended is not None and ended - float(enrolled["time"]) < 15  # type: ignore[arg-type]


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT"])
def test_3_other_signals_to_pid_1_have_no_effect(live: Live, sig: str) -> None:
    record, vast_id = serving(live)
    live.sim.signal_from_inside(vast_id, getattr(signal, sig))
    seen_before = live.records().instances[record].self_report_at or 0.0
    # two heartbeat intervals later it still runs, still reports, its Ray node still lives
    wait_for(lambda: (live.records().instances[record].self_report_at or 0) > seen_before + 4, 20)
    assert not gone(live, vast_id)
    assert not node_dead(live, record)


def test_2_term_to_pid_1_reports_first_then_gone_and_ray_node_dead(live: Live) -> None:
    record, vast_id = serving(live)
    sent = time.time()
    live.sim.signal_from_inside(vast_id, signal.SIGTERM)
    wait_for(lambda: gone(live, vast_id), 30)
    reports = [e for e in entries(live, vast_id, "worker_report") if e["kind"] != "decision"]
    assert reports, "no report reached the head"
    reported = float(reports[0]["time"])  # type: ignore[arg-type]
    destroyed = live.sim.instance(vast_id).destroyed_at  # type: ignore[union-attr]
    assert destroyed is not None and sent <= reported <= destroyed
    assert "SIGTERM" in str(reports[0]["message"]) or "signal" in str(reports[0]["message"])
    assert f"instance {vast_id}" in live.log.getvalue()  # the head's log has it too
    wait_for(lambda: node_dead(live, record), 30)


def test_5_container_restart_second_enrollment_refused_instance_gone(live: Live) -> None:
    _record, vast_id = serving(live)
    # The container's PID 1 crashes (killed from outside the container) and vast starts the
    # container again: a new boot. (A `reboot` stops the container with TERM first, which by the
    # seed's table is itself an ending: test 2.)
    pid = live.sim.runner.pid(vast_id)  # type: ignore[union-attr]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gone(live, vast_id), 60)
    refusals = [e for e in entries(live, vast_id) if "second_enrollment" in str(e)]
    assert refusals, "\n".join(
        f"{e['kind']} {e['class']} {e['message']}" for e in entries(live, vast_id)
    )


def test_4_heartbeats_blocked_head_destroys_in_window_worker_decides_as_late(live: Live) -> None:
    record, vast_id = serving(live)
    spec = live.controller.specs["live"]
    blocked = time.time()
    live.head.stop_heartbeats()
    wait_for(lambda: gone(live, vast_id), 60)
    destroyed = live.sim.instance(vast_id).destroyed_at  # type: ignore[union-attr]
    assert destroyed is not None
    last = live.records().instances[record].self_report_at or blocked
    window = spec.watchdogs.went_silent_after_seconds
    assert window - 3 <= destroyed - last <= window + 10, destroyed - last
    reasons = {str(e["class"]) for e in entries(live, vast_id)}
    assert reasons & {"went_silent", "worker_report"}, reasons


@pytest.fixture
def second(tmp_path: Path) -> Iterator[Live]:
    # the worker's Ray gives up on a lost head after 5 s instead of Ray's 60 s
    env = {"RAY_gcs_rpc_server_reconnect_timeout_s": "5"}
    with live_cluster(
        tmp_path / "c", min_workers=2, factor=1, agent_env=env, read_ray=False
    ) as cluster:
        yield cluster
    assert leftover_processes(str(tmp_path)) == []


def test_6_head_ray_stopped_every_worker_destroys_itself(second: Live) -> None:
    # (Ray reads its auth token once per process, so this second cluster is not read through
    # Ray here: its workers' own reports say that their Ray ran and then lost the head.)
    wait_for(lambda: len(second.workers()) == 2, 120)
    workers = dict(second.workers())
    # Ray's head goes; ray-vast's head services stay up to take the workers' reports
    rayhead.stop(second.state_dir, "live")
    for vast_id in workers.values():
        wait_for(lambda v=vast_id: gone(second, v), 90)
        reports = entries(second, vast_id, "worker_report")
        assert reports, f"{vast_id} left no report"
        assert "ray" in str(reports[0]["message"]).lower(), reports[0]


def test_7_down_leaves_no_instance_and_no_process(tmp_path: Path) -> None:
    with live_cluster(tmp_path / "d", min_workers=2, factor=1, read_ray=False) as live:
        wait_for(lambda: len(live.workers()) == 2, 120)
        live.stop_watch()
        env = {
            **os.environ,
            "VAST_URL": live.url,
            "VAST_API_KEY": API_KEY,
            "RAY_VAST_PACING": "off",
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "reconciler",
                "down",
                "live",
                "--auto-approve",
                "--state-dir",
                str(live.state_dir),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Ray head of live stopped." in done.stdout
        assert live.sim.instances == {}
        wait_for(lambda: leftover_processes(str(live.workdir)) == [], 30)
        head_dir = str(rayhead.temp_dir(live.state_dir, "live"))
        wait_for(lambda: leftover_processes(head_dir) == [], 30)
