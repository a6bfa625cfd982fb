"""The container's own address (`VASTSIM_SOURCE_IP`): when told one, the agent's every connection
leaves from it (the head, vast's API; the bootloader's too) and Ray advertises it. Run inside
`unshare -n` (loopback only): Linux routes all of 127.0.0.0/8 to `lo`, so binding 127.3.4.5 needs
no configuration."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent import bootloader, ending, raynode, transport
from agent.config import ConfigError, Settings
from reconciler.head import pki

SOURCE = "127.3.4.5"


@dataclass
class Seen:
    peers: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, peer)


class _Handler(BaseHTTPRequestHandler):
    seen: Seen

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.seen.peers.append((self.command, self.path, self.client_address[0]))
        data = json.dumps({"ok": True, "peer": self.client_address[0]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@dataclass
class Served:
    url: str
    seen: Seen
    ca_pem: str = ""


def _serve(context: ssl.SSLContext | None) -> Iterator[Served]:
    seen = Seen()
    handler = type("Handler", (_Handler,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    scheme = "http"
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Served(f"{scheme}://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def plain() -> Iterator[Served]:
    yield from _serve(None)


@pytest.fixture
def pinned(tmp_path: Path) -> Iterator[Served]:
    """A TLS server with a cluster CA's certificate for 127.0.0.1 (as the head's)."""
    now = time.time()
    ca = pki.new_ca("c1", now=now)
    server = pki.issue_server(ca, "c1", "127.0.0.1", now=now)
    (tmp_path / "server.pem").write_bytes(server.cert_pem)
    (tmp_path / "server.key").write_bytes(server.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    for served in _serve(context):
        yield replace(served, ca_pem=ca.cert_pem.decode())


def settings(**changes: object) -> Settings:
    env = {
        "CONTAINER_ID": "20000001",
        "CONTAINER_API_KEY": "instance-key",
        "RV_HEAD_ADDRESS": "127.0.0.1",
        "RV_ENROLL_PORT": "18443",
        "RV_CA_PEM": "pem",
        "RV_JOIN_TOKEN": "token",
        "PUBLIC_IPADDR": SOURCE,
        "VASTSIM_SOURCE_IP": SOURCE,
    }
    return replace(Settings.from_env(env), **changes)  # type: ignore[arg-type]


def test_the_settings_read_the_source_address_only_when_told() -> None:
    assert settings().source_ip == SOURCE
    env = {
        "CONTAINER_ID": "1",
        "CONTAINER_API_KEY": "k",
        "RV_HEAD_ADDRESS": "h",
        "RV_ENROLL_PORT": "1",
        "RV_CA_PEM": "pem",
        "RV_JOIN_TOKEN": "t",
    }
    assert Settings.from_env(env).source_ip is None  # on vast: the NAT's business
    with pytest.raises(ConfigError, match="VASTSIM_SOURCE_IP"):
        Settings.from_env({**env, "VASTSIM_SOURCE_IP": "not-an-address"})


def test_http_leaves_from_the_source_address_when_told(plain: Served) -> None:
    reply = transport.request(f"{plain.url}/x", method="POST", body={}, source=SOURCE)
    assert reply.status == 200 and reply.doc["peer"] == SOURCE
    reply = transport.request(f"{plain.url}/y", method="POST", body={})
    assert reply.doc["peer"] == "127.0.0.1"  # not told: the kernel picks
    assert [p for _, _, p in plain.seen.peers] == [SOURCE, "127.0.0.1"]


def test_pinned_tls_to_the_head_leaves_from_the_source_address(pinned: Served) -> None:
    context = transport.pinned_context(pinned.ca_pem)
    reply = transport.request(
        f"{pinned.url}/enroll", method="POST", body={}, context=context, source=SOURCE
    )
    assert reply.status == 200 and reply.doc["peer"] == SOURCE
    assert pinned.seen.peers == [("POST", "/enroll", SOURCE)]


def test_an_unbindable_source_address_is_no_answer(plain: Served) -> None:
    with pytest.raises(transport.TransportError):
        transport.request(f"{plain.url}/x", source="192.0.2.1")  # not an address of this host


def test_the_self_destroy_leaves_from_the_source_address(plain: Served) -> None:
    told = settings(vast_url=plain.url)
    confirmed, what = ending.destroy_once(told, timeout=5)
    assert confirmed, what
    assert plain.seen.peers == [("DELETE", "/api/v0/instances/20000001/", SOURCE)]


def test_the_bootloader_binds_too(plain: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VASTSIM_SOURCE_IP", SOURCE)
    status, body = bootloader._exchange(f"{plain.url}/agent", "GET", None, context=None, timeout=5)
    assert status == 200 and json.loads(body)["peer"] == SOURCE
    monkeypatch.delenv("VASTSIM_SOURCE_IP")
    status, body = bootloader._exchange(f"{plain.url}/agent", "GET", None, context=None, timeout=5)
    assert json.loads(body)["peer"] == "127.0.0.1"


def test_the_bootloader_binds_over_pinned_tls(
    pinned: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VASTSIM_SOURCE_IP", SOURCE)
    monkeypatch.setenv("RV_CA_PEM", pinned.ca_pem)
    status, _ = bootloader._exchange(
        f"{pinned.url}/agent", "GET", None, context=bootloader._pinned(), timeout=5
    )
    assert status == 200 and pinned.seen.peers == [("GET", "/agent", SOURCE)]


RAY = {
    "head_address": "127.0.0.1:6390",
    "node_ip_address": SOURCE,
    "node_manager_port": 40000,
    "object_manager_port": 40001,
    "worker_ports": [40002, 40003],
    "resources": {"rv-slot-q1s1": 1.0},
    "labels": {"rv_slot": "q1s1"},
    "env": {"RAY_CLOUD_INSTANCE_ID": "20000001"},
}


def node_ip(plan: raynode.RayPlan) -> str:
    [flag] = [a for a in plan.argv if a.startswith("--node-ip-address=")]
    return flag.split("=", 1)[1]


def test_ray_advertises_the_containers_own_address() -> None:
    def plan(ray: dict[str, object], told: str | None) -> raynode.RayPlan:
        return raynode.ray_plan(
            ["ray"], ray, cpus=2, gpus=0, token_path="/t", base_env={}, node_ip=told
        )

    # the answer's address is the one the agent enrolled with (PUBLIC_IPADDR)
    assert node_ip(plan(RAY, None)) == SOURCE
    # a container told its own address advertises that one
    assert node_ip(plan({**RAY, "node_ip_address": ""}, SOURCE)) == SOURCE
    assert node_ip(plan({**RAY, "node_ip_address": "203.0.113.9"}, "127.9.9.9")) == "127.9.9.9"
