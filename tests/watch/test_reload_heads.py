"""A reload reaches the head services (issue 14: `HeadApp.set_spec` was never called, and a
cluster added by a reload rented without its bootloader and head services)."""

from __future__ import annotations

import socket
from pathlib import Path

from bench.live import free_port
from fleetsim.harness import fleet
from reconciler.model.labels import label_for
from reconciler.model.records import InstanceRecord, Intent, Phase, Role
from reconciler.watch.headside import HeadServices
from tests.scenarios.world import cluster

HEAD = "head: {address: 127.0.0.1, enroll_port: %d, heartbeat_port: %d, metrics_port: %d}"


def spec(name: str, **watchdogs: int) -> object:
    ports = (free_port(), free_port(), free_port())
    return cluster(name, watchdogs=watchdogs or None, head=HEAD % ports)


def served(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def rent_request_env(heads: HeadServices, name: str, spec_: object) -> dict[str, str]:
    node_type = next(iter(spec_.node_types.values()))  # type: ignore[attr-defined]
    record = InstanceRecord(
        id="i9",
        cluster=name,
        node_type=node_type.name,
        managed_by="0" * 36,
        label=label_for(name, "0" * 36, "i9"),
        role=Role.CANDIDATE,
        intent=Intent.RUNNING,
        phase=Phase.PENDING_CREATE,
        created_at=0.0,
        offer_id=1,
        machine_id=1,
        host_id=1,
        dph_total=0.1,
    )
    request = heads.launcher.create_request(spec_, node_type, record, bid=None)  # type: ignore[arg-type]
    return dict(request.env)


def test_a_reload_adds_serves_retunes_and_removes_head_services(tmp_path: Path) -> None:
    a, b = spec("alpha"), spec("beta")
    with fleet([a]) as f:
        heads = HeadServices(
            f.controller,
            f.controller.journal,
            state_dir=tmp_path,
            clock=f.clock,
            vast_url="http://vastsim",
            secrets=(),
            agent_env=None,
        )
        try:
            assert set(heads.services) == {"alpha"}
            assert not served(b.head.enroll_port)  # type: ignore[attr-defined]
            # beta is added by a reload: its ports are served, its rentals carry the bootloader
            heads.reload({"alpha": a, "beta": b})  # type: ignore[dict-item]
            assert served(b.head.enroll_port) and served(b.head.heartbeat_port)  # type: ignore[attr-defined]
            env = rent_request_env(heads, "beta", b)
            assert env.get("RV_JOIN_TOKEN") and env.get("RV_CA_PEM")
            assert (tmp_path / "pki" / "beta").is_dir()
            # alpha's thresholds change: its app answers with the new spec
            tuned = spec("alpha", went_silent_after_seconds=900)
            heads.reload({"alpha": tuned, "beta": b})  # type: ignore[dict-item]
            assert heads.services["alpha"].app.spec is tuned
            # beta is removed: its ports close, its launcher is gone
            heads.reload({"alpha": tuned})  # type: ignore[dict-item]
            assert set(heads.services) == {"alpha"} and "beta" not in heads.launchers
            assert not served(b.head.enroll_port)  # type: ignore[attr-defined]
        finally:
            heads.stop()
        assert not served(a.head.enroll_port)  # type: ignore[attr-defined]
