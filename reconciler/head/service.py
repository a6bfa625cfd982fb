"""The head's agent services on the network: two TLS ports, each served by background threads.

- the enrollment port (TLS, server-authenticated): `POST /enroll`, `POST /report`, `GET /agent`;
- the heartbeat port, "port B" (mutual TLS, only the cluster CA's certificates): `POST /heartbeat`.

The standard library's threading HTTP server does the HTTP; this module adds the TLS. The
handshake runs in the connection's own thread (never in the accept loop, so a slow or hostile peer
holds up nobody), with a deadline; a refused handshake is reported to the app, which ledgers it.
Every answer closes its connection. `HeadService` builds the app, its destroyer and both servers
from what the watch controller has (spec, PKI, records host, ledger, provider) and runs them
until `stop`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar

from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head import tls
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan
from reconciler.head.app import Answer, HeadApp, json_answer
from reconciler.head.destroyer import Destroyer
from reconciler.head.launcher import AgentLauncher
from reconciler.head.messages import MAX_BODY
from reconciler.head.pki import ClusterPki
from reconciler.head.shared import LedgerSink, RecordsHost
from reconciler.model.spec import ClusterSpec

log = logging.getLogger("reconciler.head")

HANDSHAKE_TIMEOUT = 10.0
IO_TIMEOUT = 15.0


class _TlsServer(ThreadingHTTPServer):
    """A threading HTTP server whose connections are wrapped in TLS in their own thread."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        context: ssl.SSLContext,
        app: HeadApp,
        name: str,
    ) -> None:
        self.context = context
        self.app = app
        self.name = name
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        peer = str(client_address[0]) if isinstance(client_address, tuple) else "?"
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.app.refused_handshake(self.name, peer, _reason(exc))
            return
        try:
            connection.settimeout(IO_TIMEOUT)
            super().finish_request(connection, client_address)
        finally:
            with contextlib.suppress(OSError):
                connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("head %s port: error serving %s", self.name, client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Routes a request to the app. Subclasses name the routes of their port."""

    server: _TlsServer
    server_version = "ray-vast-head"
    sys_version = ""
    routes: ClassVar[dict[tuple[str, str], str]] = {}

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        name = self.routes.get((method, self.path.split("?", 1)[0]))
        if name is None:
            self._send(json_answer(404, {"error": "not_found", "message": "no such endpoint"}))
            return
        body = self._body() if method == "POST" else b""
        if body is None:
            return
        try:
            answer = self._call(name, body)
        except Exception:
            log.exception("head %s port: %s failed", self.server.name, name)
            answer = json_answer(500, {"error": "bad_request", "message": "internal error"})
        self._send(answer)

    def _call(self, name: str, body: bytes) -> Answer:
        app = self.server.app
        if name == "enroll":
            return app.enroll(body, peer=self.client_address[0])
        if name == "report":
            return app.report(body, peer=self.client_address[0])
        if name == "agent":
            return app.agent_download()
        cert = self.connection.getpeercert(binary_form=True)
        return app.heartbeat(cert, body, peer=self.client_address[0])

    def _body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(json_answer(411, {"error": "bad_request", "message": "length required"}))
            return None
        if not 0 <= length <= MAX_BODY:
            self._send(json_answer(413, {"error": "bad_request", "message": "body too large"}))
            return None
        return self.rfile.read(length)

    def _send(self, answer: Answer) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Connection", "close")
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("head %s port: %s %s", self.server.name, self.address_string(), format % args)


class _EnrollHandler(_Handler):
    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/enroll"): "enroll",
        ("POST", "/report"): "report",
        ("GET", "/agent"): "agent",
    }


class _HeartbeatHandler(_Handler):
    routes: ClassVar[dict[tuple[str, str], str]] = {("POST", "/heartbeat"): "heartbeat"}


class HeadService:
    """Enrollment and heartbeats for one cluster, served until `stop`.

    The ports are bound when the service is made (port 0 picks a free one), so `endpoints` and a
    `launcher()` are ready before `start`. `bind_host` defaults to every interface: the workers
    are on the internet.
    """

    def __init__(
        self,
        *,
        spec: ClusterSpec,
        cluster_pki: ClusterPki,
        host: RecordsHost,
        ledger: LedgerSink,
        provider: Provider,
        lineage: str,
        clock: Clock,
        agent: AgentBundle | None = None,
        ports: PortPlan | None = None,
        bind_host: str = "0.0.0.0",  # noqa: S104 - workers reach the head over the internet
        enroll_port: int | None = None,
        heartbeat_port: int | None = None,
    ) -> None:
        self.destroyer = Destroyer(
            cluster=spec.name, provider=provider, host=host, ledger=ledger, clock=clock
        )
        bundle = agent if agent is not None else AgentBundle.load()
        self.app = HeadApp(
            spec=spec,
            cluster_pki=cluster_pki,
            host=host,
            ledger=ledger,
            destroyer=self.destroyer,
            lineage=lineage,
            clock=clock,
            endpoints=HeadEndpoints(spec.head.address, spec.head.ray_port, 0, 0),
            agent=bundle,
            ports=ports,
        )
        enroll = spec.head.enroll_port if enroll_port is None else enroll_port
        beat = spec.head.heartbeat_port if heartbeat_port is None else heartbeat_port
        self._servers = [
            _TlsServer(
                (bind_host, enroll),
                _EnrollHandler,
                context=tls.enrollment_server_context(cluster_pki),
                app=self.app,
                name="enrollment",
            )
        ]
        try:
            self._servers.append(
                _TlsServer(
                    (bind_host, beat),
                    _HeartbeatHandler,
                    context=tls.heartbeat_server_context(cluster_pki),
                    app=self.app,
                    name="heartbeat",
                )
            )
        except BaseException:
            self._servers[0].server_close()
            raise
        self.app.endpoints = HeadEndpoints(
            spec.head.address,
            spec.head.ray_port,
            _port(self._servers[0]),
            _port(self._servers[1]),
        )
        self._threads: list[threading.Thread] = []

    @property
    def endpoints(self) -> HeadEndpoints:
        return self.app.endpoints

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        """The head's alerts not added again within a minute, by (cluster, class)."""
        return self.app.alert_repeats()

    def launcher(
        self,
        *,
        vast_url: str,
        clock: Clock,
        python: str = "python3",
        forbidden: tuple[str, ...] = (),
        agent_env: Mapping[str, str] | None = None,
    ) -> AgentLauncher:
        """The launcher whose candidates enroll here."""
        return launcher_for(
            self.app,
            vast_url=vast_url,
            clock=clock,
            python=python,
            forbidden=forbidden,
            agent_env=agent_env,
        )

    def start(self) -> None:
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"rv-head-{server.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        self.destroyer.start()

    def stop_heartbeats(self) -> None:
        """Close port B alone (the head's heartbeat service is down; enrollment stays up)."""
        self._close(self._servers[1])

    def stop(self) -> None:
        for server in self._servers:
            self._close(server)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        self.destroyer.stop()

    def _close(self, server: _TlsServer) -> None:
        if server.socket.fileno() < 0:
            return
        if any(t.name == f"rv-head-{server.name}" and t.is_alive() for t in self._threads):
            server.shutdown()
        server.server_close()

    def __enter__(self) -> HeadService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def launcher_for(
    app: HeadApp,
    *,
    vast_url: str,
    clock: Clock,
    python: str = "python3",
    forbidden: tuple[str, ...] = (),
    agent_env: Mapping[str, str] | None = None,
) -> AgentLauncher:
    """The launcher whose candidates enroll at `app`: its endpoints, its CA, its agent bundle and
    its port plan go into every create request. A head served on sockets (`HeadService`) and one
    called in-process (the virtual-time harness) build it the same way."""
    return AgentLauncher(
        endpoints=app.endpoints,
        ca_pem=app.pki.ca_pem,
        agent=app.agent,
        vast_url=vast_url,
        clock=clock,
        ports=app.ports,
        python=python,
        forbidden=forbidden,
        agent_env=agent_env,
    )


def _port(server: _TlsServer) -> int:
    sock: socket.socket = server.socket
    return int(sock.getsockname()[1])


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return type(exc).__name__ if not str(exc) else str(exc)
