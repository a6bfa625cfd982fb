"""Nothing that reaches the head's ports can flood them or hold them: over real sockets and real
TLS, against a served head (`head_world`).

The caps on connections (per source address, per port) close what is beyond them at once in the
accept loop; a peer that sends its handshake or its request a byte at a time is cut at its
deadline while others are served; an oversized request head is answered 431 and closed; plain
HTTP is refused at the handshake without a traceback and changes no record. The TLS contexts are
TLS 1.2+, without compression, renegotiation or tickets.

Each source is a loopback address of its own (127.0.0.0/8 is all on lo), so one machine can
tell a worker from a stranger.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.head import pki, tls
from reconciler.head.server import LIMITS

from ..waiting import wait_for
from .harness import HeadWorld, client_pair, head_world, heartbeat_body

# Deadlines short enough for a test, still far above a loopback handshake and request.
QUICK = replace(LIMITS, handshake_seconds=1.5, request_seconds=2.5)
# Deadlines long enough that idle connections are still held when the test looks.
PATIENT = replace(LIMITS, handshake_seconds=60.0, request_seconds=60.0)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        yield w


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Sockets a test opens; all closed at its end."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def port_number(world: HeadWorld, port: str) -> int:
    endpoints = world.service.endpoints
    return endpoints.heartbeat_port if port == "heartbeat" else endpoints.enroll_port


def tcp(world: HeadWorld, port: str, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(
        ("127.0.0.1", port_number(world, port)), timeout=10, source_address=(source, 0)
    )


def tls_socket(
    world: HeadWorld, port: str, *, client: pki.Issued | None = None, source: str = "127.0.0.1"
) -> ssl.SSLSocket:
    context = tls.client_context(world.pki.ca_pem, client=client)
    return context.wrap_socket(tcp(world, port, source), server_hostname="127.0.0.1")


def answer_of(sock: socket.socket) -> tuple[int, bytes]:
    """Everything the head answers until it closes: (status, body); (0, b"") for no answer."""
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    if not data:
        return 0, b""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def closed_by_head(sock: socket.socket, timeout: float) -> bool:
    """True when the head closes (or resets) `sock` within `timeout`."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def enrolled(world: HeadWorld) -> tuple[dict, pki.Issued]:
    rented = world.rent(world.place(slots=1))
    reply = world.enroll(rented)
    assert reply.status == 200, reply.doc
    return reply.doc, client_pair(reply.doc)


def conn_threads(port: str) -> int:
    return sum(t.name == f"rv-head-{port}-conn" for t in threading.enumerate())


# --- TLS ---------------------------------------------------------------------------------------


def test_both_server_contexts_are_tls12_plus_without_compression_renegotiation_or_tickets(
    tmp_path: Path,
):
    cluster_pki = pki.ClusterPki.load_or_create(
        pki.pki_dir(tmp_path, "hc"), "hc", "127.0.0.1", now=time.time()
    )
    enrollment = tls.enrollment_server_context(cluster_pki)
    heartbeat = tls.heartbeat_server_context(cluster_pki)
    for context in (enrollment, heartbeat):
        assert context.minimum_version is ssl.TLSVersion.TLSv1_2
        assert context.options & ssl.OP_NO_COMPRESSION
        assert context.options & ssl.OP_NO_RENEGOTIATION
        assert context.options & ssl.OP_NO_TICKET
        assert context.num_tickets == 0
    assert enrollment.verify_mode is ssl.CERT_NONE
    assert heartbeat.verify_mode is ssl.CERT_REQUIRED


@pytest.mark.parametrize("port", ["enrollment", "heartbeat"])
def test_a_tls_1_1_client_is_refused(world: HeadWorld, sockets: list[socket.socket], port: str):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1 and 1.1 are deprecated
        context.minimum_version = ssl.TLSVersion.TLSv1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 builds no TLS 1.1 hello otherwise
    raw = tcp(world, port)
    sockets.append(raw)
    with pytest.raises(ssl.SSLError):
        sockets.append(context.wrap_socket(raw))
    refused = wait_for(
        lambda: [r for (p, r) in world.service.refusals() if p == port],
        timeout=5,
        what="the old client counted",
    )
    assert refused == ["tls:UNSUPPORTED_PROTOCOL"]


# --- connections -------------------------------------------------------------------------------


def test_300_idle_connections_do_not_keep_a_heartbeat_out(
    world: HeadWorld, sockets: list[socket.socket]
):
    world.service.limits = PATIENT
    answer, client = enrolled(world)
    # 30 each from ten addresses, under the per-source cap: all 300 are held (a thread each)
    for i in range(300):
        sockets.append(tcp(world, "heartbeat", source=f"127.0.1.{1 + i // 30}"))
    wait_for(lambda: world.service.open_connections()["heartbeat"] == 300, timeout=10)

    started = time.monotonic()
    reply = world.heartbeat(answer, client=client)
    assert reply.status == 200, reply.doc
    assert time.monotonic() - started < 2.0

    for sock in sockets:
        sock.close()
    wait_for(lambda: world.service.open_connections()["heartbeat"] == 0, timeout=10)
    assert conn_threads("heartbeat") == 0


def test_connections_beyond_the_per_source_cap_are_closed_at_once_while_another_source_gets_in(
    world: HeadWorld, sockets: list[socket.socket]
):
    world.service.limits = PATIENT
    cap = PATIENT.per_source
    for _ in range(cap):
        sockets.append(tcp(world, "enrollment", source="127.0.0.9"))
    wait_for(lambda: world.service.open_connections()["enrollment"] == cap, timeout=10)

    for _ in range(5):
        beyond = tcp(world, "enrollment", source="127.0.0.9")
        sockets.append(beyond)
        assert closed_by_head(beyond, timeout=1.0)
    assert world.service.refusals()[("enrollment", "source_cap")] == 5
    assert world.service.open_connections()["enrollment"] == cap
    assert conn_threads("enrollment") == cap  # no thread for what the cap refused

    # another source is served meanwhile, from enrollment to heartbeat
    answer, client = enrolled(world)
    assert world.heartbeat(answer, client=client).status == 200


def test_connections_beyond_the_total_cap_are_closed_at_once(
    world: HeadWorld, sockets: list[socket.socket]
):
    world.service.limits = replace(PATIENT, total=8)
    for i in range(8):
        sockets.append(tcp(world, "heartbeat", source=f"127.0.2.{1 + i}"))
    wait_for(lambda: world.service.open_connections()["heartbeat"] == 8, timeout=10)
    beyond = tcp(world, "heartbeat", source="127.0.2.99")
    sockets.append(beyond)
    assert closed_by_head(beyond, timeout=1.0)
    assert world.service.refusals()[("heartbeat", "total_cap")] == 1
    # the other port has caps of its own
    assert world.call("GET", "/agent", raw=True).status == 200


def test_closing_a_port_cuts_the_connections_it_holds(
    world: HeadWorld, sockets: list[socket.socket]
):
    world.service.limits = PATIENT
    for _ in range(5):
        sockets.append(tcp(world, "heartbeat", source="127.0.0.7"))
    wait_for(lambda: world.service.open_connections()["heartbeat"] == 5, timeout=10)
    world.service.stop_heartbeats()
    assert world.service.open_connections()["heartbeat"] == 0
    assert all(closed_by_head(sock, timeout=1.0) for sock in sockets)


# --- deadlines ---------------------------------------------------------------------------------


def dribble(sock: socket.socket, data: bytes, *, every: float, limit: float) -> float:
    """Send `data` a byte at a time, `every` seconds apart, until the head cuts the connection;
    the seconds that took (`limit` if it never did)."""
    started = time.monotonic()
    for byte in data:
        try:
            sock.send(bytes([byte]))
        except OSError:
            return time.monotonic() - started
        if closed_by_head(sock, timeout=every):
            return time.monotonic() - started
        if time.monotonic() - started > limit:
            break
    return limit


def test_a_slowloris_peer_is_cut_at_its_deadline_on_each_port_while_others_are_served(
    world: HeadWorld, sockets: list[socket.socket]
):
    world.service.limits = QUICK
    answer, client = enrolled(world)
    slow_head = b"POST /enroll HTTP/1.1\r\nHost: head\r\n" + b"X-Slow: " + b"a" * 200
    slow_beat = slow_head.replace(b"/enroll", b"/heartbeat")
    # a TLS record header announcing 512 bytes of ClientHello, then the bytes, slowly
    slow_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 200
    peers = {
        "enrollment head": (tls_socket(world, "enrollment", source="127.0.3.1"), slow_head),
        "heartbeat head": (
            tls_socket(world, "heartbeat", client=client, source="127.0.3.2"),
            slow_beat,
        ),
        "enrollment hello": (tcp(world, "enrollment", source="127.0.3.3"), slow_hello),
        "heartbeat hello": (tcp(world, "heartbeat", source="127.0.3.4"), slow_hello),
    }
    sockets.extend(sock for sock, _ in peers.values())
    cut: dict[str, float] = {}

    def run(name: str) -> None:
        sock, data = peers[name]
        cut[name] = dribble(sock, data, every=0.2, limit=30.0)

    threads = [threading.Thread(target=run, args=(name,)) for name in peers]
    for thread in threads:
        thread.start()
    # meanwhile, a candidate enrolls and a worker heartbeats
    rented = world.rent(world.place(slots=1))
    assert world.enroll(rented).status == 200
    assert world.heartbeat(answer, client=client).status == 200
    for thread in threads:
        thread.join(timeout=40)

    # the request's deadline counts from the accept (the handshake took part of it)
    for name in ("enrollment head", "heartbeat head"):
        assert QUICK.request_seconds - 0.5 < cut[name] < QUICK.request_seconds + 1.0, cut
    for name in ("enrollment hello", "heartbeat hello"):
        assert QUICK.handshake_seconds - 0.5 < cut[name] < QUICK.handshake_seconds + 1.0, cut
    refusals = world.service.refusals()
    for port in ("enrollment", "heartbeat"):
        assert refusals[(port, "deadline")] == 1
        assert refusals[(port, "tls:timeout")] == 1


# --- the request's head ------------------------------------------------------------------------


def post_head(path: str, headers: list[bytes]) -> bytes:
    return b"".join([f"POST {path} HTTP/1.1\r\n".encode(), *headers, b"\r\n"])


@pytest.mark.parametrize(
    ("headers", "status", "reason"),
    [
        (
            [b"Host: head\r\n"] + [f"X-Line-{i}: v\r\n".encode() for i in range(60)],
            431,
            "header_lines",
        ),
        ([b"Host: head\r\n", b"X-Big: " + b"a" * 64 * 1024 + b"\r\n"], 431, "header_bytes"),
        (
            [b"Host: head\r\n"] + [f"X-Line-{i}: {'v' * 400}\r\n".encode() for i in range(45)],
            431,
            "header_bytes",
        ),
    ],
    ids=["60 header lines", "a 64 KiB header", "45 lines of 400 bytes"],
)
def test_an_oversized_request_head_is_refused(
    world: HeadWorld,
    sockets: list[socket.socket],
    headers: list[bytes],
    status: int,
    reason: str,
):
    sock = tls_socket(world, "enrollment")
    sockets.append(sock)
    sock.sendall(post_head("/enroll", headers))
    got, body = answer_of(sock)
    assert got == status, body
    assert world.service.refusals() == {("enrollment", reason): 1}
    # the peer is served again on its next connection
    assert world.call("GET", "/agent", raw=True).status == 200


def test_a_long_request_line_and_a_bad_one_are_refused(
    world: HeadWorld, sockets: list[socket.socket]
):
    long_line = tls_socket(world, "enrollment")
    sockets.append(long_line)
    long_line.sendall(b"GET /" + b"a" * 8192 + b" HTTP/1.1\r\nHost: head\r\n\r\n")
    assert answer_of(long_line)[0] == 414
    bad = tls_socket(world, "enrollment")
    sockets.append(bad)
    bad.sendall(b"NONSENSE\r\n\r\n")
    assert answer_of(bad)[0] == 400
    assert world.service.refusals() == {
        ("enrollment", "request_line"): 1,
        ("enrollment", "http_400"): 1,
    }


def test_a_request_within_the_limits_is_answered(world: HeadWorld, sockets: list[socket.socket]):
    """50 header lines in 16 KiB: still taken (the limits are not off by one)."""
    answer, client = enrolled(world)
    body = json.dumps(heartbeat_body(answer)).encode()
    headers = [f"X-Line-{i}: {'v' * 300}\r\n".encode() for i in range(47)]
    headers += [b"Host: head\r\n", b"Content-Type: application/json\r\n"]
    headers.append(f"Content-Length: {len(body)}\r\n".encode())
    assert len(headers) == 50
    sock = tls_socket(world, "heartbeat", client=client)
    sockets.append(sock)
    sock.sendall(post_head("/heartbeat", headers) + body)
    status, answered = answer_of(sock)
    assert status == 200, answered
    assert world.service.refusals() == {}


# --- not TLS at all ----------------------------------------------------------------------------


def test_plain_http_on_either_tls_port_is_refused_at_the_handshake_and_changes_no_record(
    world: HeadWorld, sockets: list[socket.socket], caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    before, saves = world.records(), len(world.saved)
    for port in ("enrollment", "heartbeat"):
        sock = tcp(world, port, source="127.0.4.1")
        sockets.append(sock)
        sock.sendall(b"POST /enroll HTTP/1.1\r\nHost: head\r\nContent-Length: 2\r\n\r\n{}")
        assert answer_of(sock) == (0, b"")  # no HTTP answer, not even an error page
    wait_for(
        lambda: world.ledger("tls_refused") and world.ledger("heartbeat_refused"),
        timeout=5,
        what="both refusals noted",
    )
    assert world.service.refusals() == {
        ("enrollment", "tls:HTTP_REQUEST"): 1,
        ("heartbeat", "tls:HTTP_REQUEST"): 1,
    }
    assert world.records() == before and len(world.saved) == saves
    assert not [r for r in caplog.records if r.exc_info], "a traceback in the head's log"
