"""The head's agent services on the network: two TLS ports, each served by background threads.

- the enrollment port (TLS, server-authenticated): `POST /enroll`, `POST /report`, `GET /agent`;
- the heartbeat port, "port B" (mutual TLS, only the cluster CA's certificates): `POST /heartbeat`,
  and `POST /resume` (a worker back after a deliberate stop, with its kept certificate).

The standard library's HTTP server parses the HTTP; this module adds the TLS and what a port facing
the internet must bound (`Limits`), so that nothing that reaches a port can flood it or hold it:

- connections: at most `per_source` at once from one address and `total` per port. The accept loop
  counts them and closes one beyond a cap at once: no thread, no handshake. Each admitted
  connection gets one thread, which does the handshake (never the accept loop, so a slow peer
  holds up nobody) and the one request; every answer closes its connection;
- time: the handshake, then the request's head and body, must be complete within a deadline
  counted from the accept (`handshake_seconds`, `request_seconds`), however slowly the bytes come:
  a socket timeout per read would let a peer that sends a byte a second hold a thread forever, so
  every read is given only what is left of the deadline. The answer has its own (`write_seconds`);
- size: the request line, the count of header lines and the header bytes are bounded (414, 431)
  before the standard library parses them; the body by `MAX_BODY` (413).

Every refusal is counted in memory by (port, reason) (`HeadService.refusals`) and handed to the
app's `refused_handshake`, which notes refusals in aggregate (a ledger line a minute at most per
source and class); the hand-over goes through a queue and a thread of its own, so neither the
accept loop nor a connection ever waits for the records lock or the ledger's fsync.

`HeadService` builds the app and both servers from what the watch controller has (spec, PKI,
records host, ledger, and the controller's one applier) and runs them until `stop`. A head run
alone (tests, a head without `watch`) gets an applier of its own over its provider.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from reconciler.applying.applier import Applier
from reconciler.applying.books import HostBooks
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.head import tls
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan
from reconciler.head.app import Answer, HeadApp, json_answer
from reconciler.head.launcher import AgentLauncher
from reconciler.head.messages import MAX_BODY
from reconciler.head.pki import ClusterPki
from reconciler.head.shared import LedgerSink, RecordsHost
from reconciler.model.spec import ClusterSpec

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

log = logging.getLogger("reconciler.head")


@dataclass(frozen=True)
class Limits:
    """What one peer may hold of a port. The defaults leave a real agent (one request of a few
    KiB every few seconds, over a slow link far away) a wide margin."""

    # Connections at once from one address (an agent has one at a time; a NAT of a few dozen
    # hosts fits) and per port in all (a thread each).
    per_source: int = 32
    total: int = 512
    # From the accept: the TLS handshake done (a few round trips), and the whole request read.
    handshake_seconds: float = 5.0
    request_seconds: float = 10.0
    # Writing the answer (the largest is the agent's zip, under 100 KiB).
    write_seconds: float = 20.0
    # The request's head: an agent sends one short request line and under ten header lines.
    request_line_bytes: int = 4096
    header_lines: int = 50
    header_bytes: int = 16 * 1024
    # After a refusal answered before the request was read: how long, and how much, to read what
    # the peer still sends before closing (closing on unread bytes resets the connection and the
    # peer may lose the answer).
    linger_seconds: float = 1.0
    linger_bytes: int = 256 * 1024


LIMITS = Limits()
# Refusals waiting for the app's note, at most; beyond, they are counted and not noted.
NOTE_BACKLOG = 10_000
# The listen backlog: a burst of connections waits in the kernel for the accept loop, rather
# than in SYN retransmits a second or more later.
LISTEN_BACKLOG = 1024
# How long `stop` waits for the connections it cut to end.
STOP_JOIN_SECONDS = 5.0


class _Refusals:
    """Refused connections and requests: counted by (port, reason), and handed to the app's
    `refused_handshake` in order by one thread (`start`, `stop`)."""

    def __init__(self, app: HeadApp) -> None:
        self.app = app
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, str, str] | None] = queue.Queue(maxsize=NOTE_BACKLOG)
        self._thread: threading.Thread | None = None
        self.unnoted = 0

    def refuse(self, port: str, peer: str, reason: str, detail: str) -> None:
        """Count a refusal and queue its note; never blocks."""
        with self._lock:
            self._counts[(port, reason)] += 1
        try:
            self._queue.put_nowait((port, peer, detail))
        except queue.Full:
            with self._lock:
                self.unnoted += 1

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._note, name="rv-head-refusals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Note what is queued, then end the thread."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=STOP_JOIN_SECONDS)
        self._thread.join(timeout=STOP_JOIN_SECONDS)
        self._thread = None

    def _note(self) -> None:
        while (item := self._queue.get()) is not None:
            port, peer, detail = item
            try:
                self.app.refused_handshake(port, peer, detail)
            except Exception:
                log.exception("head %s port: noting a refusal of %s failed", port, peer)


class _TlsServer(HTTPServer):
    """An HTTP server whose connections are admitted by `Limits` in the accept loop, then wrapped
    in TLS and served in a thread each."""

    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[_Handler],
        *,
        context: ssl.SSLContext,
        app: HeadApp,
        name: str,
        refusals: _Refusals,
        limits: Limits,
    ) -> None:
        self.handler = handler
        self.context = context
        self.app = app
        self.name = name
        self.refusals = refusals
        self.limits = limits
        self._lock = threading.Lock()
        self._by_source: Counter[str] = Counter()
        # the thread of each admitted connection, and its socket's descriptor (for `cut_all`)
        self._open: dict[threading.Thread, int] = {}
        self.closing = False  # set by `cut_all`: what it cuts is not a peer's fault
        super().__init__(address, handler)

    # --- the accept loop -------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        """In the accept loop: admit the connection within the caps (a thread of its own) or
        close it at once."""
        peer = _peer(client_address)
        refused = self._admit(peer)
        if refused is not None:
            self.refuse(peer, *refused)
            self.shutdown_request(request)
            return
        deadline = time.monotonic() + self.limits.request_seconds
        thread = threading.Thread(
            target=self._connection,
            args=(request, client_address, peer, deadline),
            name=f"rv-head-{self.name}-conn",
            daemon=True,
        )
        with self._lock:
            self._open[thread] = request.fileno()
        try:
            thread.start()
        except BaseException:
            self._release(thread, peer)
            self.shutdown_request(request)
            raise

    def _admit(self, peer: str) -> tuple[str, str] | None:
        limits = self.limits
        with self._lock:
            if len(self._open) >= limits.total:
                return "total_cap", f"too many connections to this port ({limits.total})"
            if self._by_source[peer] >= limits.per_source:
                return "source_cap", f"too many connections from this address ({limits.per_source})"
            self._by_source[peer] += 1
            return None

    def _release(self, thread: threading.Thread, peer: str) -> None:
        with self._lock:
            self._open.pop(thread, None)
            self._by_source[peer] -= 1
            if self._by_source[peer] <= 0:
                del self._by_source[peer]

    # --- one connection, in its own thread -------------------------------------------------

    def _connection(
        self, request: socket.socket, client_address: Any, peer: str, deadline: float
    ) -> None:
        connection: ssl.SSLSocket | None = None
        try:
            connection = self.context.wrap_socket(
                request, server_side=True, do_handshake_on_connect=False
            )
            if self._handshake(connection, peer, deadline):
                self.handler(connection, client_address, self, deadline=deadline)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            # Deregistered before the descriptor is closed: `cut_all` never shuts down a
            # descriptor the system has given to something else since.
            self._release(threading.current_thread(), peer)
            if connection is not None:
                with contextlib.suppress(OSError):
                    connection.close()
            self.shutdown_request(request)

    def _handshake(self, connection: ssl.SSLSocket, peer: str, deadline: float) -> bool:
        left = min(self.limits.handshake_seconds, deadline - time.monotonic())
        try:
            connection.settimeout(max(left, 0.001))
            connection.do_handshake()
        except TimeoutError:
            self.refuse(peer, "tls:timeout", "handshake not done in time")
            return False
        except (ssl.SSLError, OSError) as exc:
            detail = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else str(exc)
            self.refuse(peer, f"tls:{_reason(exc)}", detail or _reason(exc))
            return False
        return True

    def refuse(self, peer: str, reason: str, detail: str) -> None:
        if not self.closing:
            self.refusals.refuse(self.name, peer, reason, detail)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("head %s port: error serving %s", self.name, client_address, exc_info=True)

    # --- for the service -------------------------------------------------------------------

    def open_connections(self) -> int:
        with self._lock:
            return len(self._open)

    def cut_all(self, timeout: float) -> None:
        """End every admitted connection (shut down under it, so a thread blocked in a read
        returns at once) and wait up to `timeout` for their threads."""
        self.closing = True
        with self._lock:
            for fd in self._open.values():
                _shutdown_descriptor(fd)
            threads = list(self._open)
        until = time.monotonic() + timeout
        for thread in threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read given only what is left until `deadline`."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        super().__init__()
        self._connection = connection
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._connection.settimeout(left)
        return self._connection.recv_into(buffer)


class _DeadlineWriter(io.BufferedIOBase):
    """Writes to the connection, all of them done by `deadline` (set when the answer starts)."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        super().__init__()
        self._connection = connection
        self.deadline = deadline

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the answer's deadline passed")
            self._connection.settimeout(left)
            sent += self._connection.send(view[sent:])
        return sent


class _Handler(BaseHTTPRequestHandler):
    """One request of one connection, read within the limits, routed to the app. Subclasses name
    the routes of their port."""

    server: _TlsServer
    server_version = "ray-vast-head"
    sys_version = ""
    # a request line without a version is answered with a status line all the same (HTTP/0.9
    # would answer a refusal with a bare body)
    default_request_version = "HTTP/1.0"
    routes: ClassVar[dict[tuple[str, str], str]] = {}

    def __init__(
        self, request: Any, client_address: Any, server: _TlsServer, *, deadline: float
    ) -> None:
        self.deadline = deadline
        self.linger = False
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.deadline))
        self.writer = _DeadlineWriter(self.connection, self.deadline)
        self.wfile = self.writer

    def handle(self) -> None:
        self.close_connection = True
        self.requestline, self.request_version, self.command = "", "", ""
        try:
            self._one_request()
            if self.linger:
                self._linger()
        except TimeoutError:
            self._refused("deadline", "request or answer not done in time")
        except OSError as exc:  # ssl.SSLError too: the peer went away, or sent no TLS
            log.debug("head %s port: %s: %s", self.server.name, self.client_address, exc)

    def _one_request(self) -> None:
        head = self._head()
        if head is None:
            return
        self.raw_requestline, stream = head[0], self.rfile
        self.rfile = io.BytesIO(b"".join(head[1:]) + b"\r\n")
        try:
            parsed = self.parse_request()  # what it refuses, it answers with `send_error`
        finally:
            self.rfile = stream
        if not parsed:
            return
        if self.command not in ("GET", "POST"):
            self._refuse(501, "method", "unsupported method")
            return
        self._route(self.command)

    def _head(self) -> list[bytes] | None:
        """The request line and the header lines, within the limits (None: refused or closed)."""
        limits = self.server.limits
        line = self.rfile.readline(limits.request_line_bytes + 1)
        if not line:
            return None
        if len(line) > limits.request_line_bytes:
            self._refuse(414, "request_line", "request line too long")
            return None
        head, size = [line], 0
        while True:
            header = self.rfile.readline(limits.header_bytes - size + 1)
            size += len(header)
            if size > limits.header_bytes:
                self._refuse(431, "header_bytes", "request headers too large")
                return None
            if header in (b"\r\n", b"\n"):
                return head
            if not header.endswith(b"\n"):
                return None  # the peer closed in the middle of the head
            head.append(header)
            if len(head) - 1 > limits.header_lines:
                self._refuse(431, "header_lines", "too many request headers")
                return None

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's refusals (a malformed request line, a bad version), answered
        as every other refusal."""
        self._refuse(code, f"http_{code}", message or "bad request")

    def _route(self, method: str) -> None:
        name = self.routes.get((method, self.path.split("?", 1)[0]))
        if name is None:
            self._refuse(404, "not_found", "no such endpoint", error="not_found")
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
            return app.agent_download(peer=self.client_address[0])
        cert = self.connection.getpeercert(binary_form=True)
        if name == "resume":
            return app.resume(cert, body, peer=self.client_address[0])
        return app.heartbeat(cert, body, peer=self.client_address[0])

    def _body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse(411, "length_required", "length required")
            return None
        if not 0 <= length <= MAX_BODY:
            self._refuse(413, "body_too_large", "body too large")
            return None
        body = self.rfile.read(length)
        if len(body) < length:
            return None  # the peer closed before the end of its body
        return body

    def _refuse(
        self, status: int, reason: str, message: str, *, error: str = "bad_request"
    ) -> None:
        """Refused before the app: counted, answered, and the rest of the request not read."""
        self._refused(reason, message)
        self.linger = True
        self._send(json_answer(status, {"error": error, "message": message}))

    def _refused(self, reason: str, detail: str) -> None:
        self.server.refuse(_peer(self.client_address), reason, detail)

    def _send(self, answer: Answer) -> None:
        self.writer.deadline = time.monotonic() + self.server.limits.write_seconds
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Connection", "close")
        for key, value in answer.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(answer.body)

    def _linger(self) -> None:
        """End our side, then read (a little, briefly) what the peer still sends, so that our
        close does not reset the connection under an answer the peer has not read yet."""
        limits = self.server.limits
        connection: socket.socket = self.connection
        until = time.monotonic() + limits.linger_seconds
        drained = 0
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_WR)
            while drained < limits.linger_bytes and (left := until - time.monotonic()) > 0:
                connection.settimeout(left)
                data = connection.recv(65536)
                if not data:
                    return
                drained += len(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("head %s port: %s %s", self.server.name, self.address_string(), format % args)


class _EnrollHandler(_Handler):
    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/enroll"): "enroll",
        ("POST", "/report"): "report",
        ("GET", "/agent"): "agent",
    }


class _HeartbeatHandler(_Handler):
    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/heartbeat"): "heartbeat",
        ("POST", "/resume"): "resume",
    }


class HeadService:
    """Enrollment and heartbeats for one cluster, served until `stop`.

    The ports are bound when the service is made (port 0 picks a free one), so `endpoints` and a
    `launcher()` are ready before `start`. `bind_host` defaults to every interface: the workers
    are on the internet. `limits` bound what a peer may hold of either port (`Limits`);
    `refusals()` counts what they refused.
    """

    def __init__(
        self,
        *,
        spec: ClusterSpec,
        cluster_pki: ClusterPki,
        host: RecordsHost,
        ledger: LedgerSink,
        lineage: str,
        clock: Clock,
        provider: Provider | None = None,
        applier: Applier | None = None,
        agent: AgentBundle | None = None,
        ports: PortPlan | None = None,
        bind_host: str = "0.0.0.0",  # noqa: S104 - workers reach the head over the internet
        enroll_port: int | None = None,
        heartbeat_port: int | None = None,
        limits: Limits = LIMITS,
    ) -> None:
        if applier is None:
            if provider is None:
                raise ValueError("a head service needs the controller's applier or a provider")
            applier = Applier(
                provider=provider,
                books=HostBooks(host, ledger, lineage),
                now=clock.now,
                specs=lambda: {self.app.spec.name: self.app.spec},
            )
            self._own_applier: Applier | None = applier
        else:
            self._own_applier = None
        self.applier = applier
        bundle = agent if agent is not None else AgentBundle.load()
        self.app = HeadApp(
            spec=spec,
            cluster_pki=cluster_pki,
            host=host,
            ledger=ledger,
            applier=applier,
            lineage=lineage,
            clock=clock,
            endpoints=HeadEndpoints(spec.head.address, spec.head.ray_port, 0, 0),
            agent=bundle,
            ports=ports,
        )
        enroll = spec.head.enroll_port if enroll_port is None else enroll_port
        beat = spec.head.heartbeat_port if heartbeat_port is None else heartbeat_port
        self._refusals = _Refusals(self.app)
        self._servers = [
            _TlsServer(
                (bind_host, enroll),
                _EnrollHandler,
                context=tls.enrollment_server_context(cluster_pki),
                app=self.app,
                name="enrollment",
                refusals=self._refusals,
                limits=limits,
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
                    refusals=self._refusals,
                    limits=limits,
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

    @property
    def limits(self) -> Limits:
        return self._servers[0].limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        """New limits for both ports, from the next connection on."""
        for server in self._servers:
            server.limits = limits

    def refusals(self) -> dict[tuple[str, str], int]:
        """Connections and requests the ports refused before the app, by (port, reason): the
        caps (`source_cap`, `total_cap`), a handshake (`tls:<OpenSSL's reason>`, `tls:timeout`),
        the request's deadline (`deadline`) and head (`request_line`, `header_lines`,
        `header_bytes`, `http_<status>`), and what no route takes (`not_found`, `method`,
        `length_required`, `body_too_large`). Port is "enrollment" or "heartbeat"."""
        return self._refusals.counts()

    def open_connections(self) -> dict[str, int]:
        """Connections admitted and not yet ended, by port."""
        return {server.name: server.open_connections() for server in self._servers}

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
        self._refusals.start()
        for server in self._servers:
            thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"rv-head-{server.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop_heartbeats(self) -> None:
        """Close port B alone (the head's heartbeat service is down; enrollment stays up)."""
        self._close(self._servers[1])

    def stop(self) -> None:
        for server in self._servers:
            self._close(server)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        self._refusals.stop()
        if self._own_applier is not None:
            self._own_applier.stop()

    def _close(self, server: _TlsServer) -> None:
        if server.socket.fileno() < 0:
            return
        if any(t.name == f"rv-head-{server.name}" and t.is_alive() for t in self._threads):
            server.shutdown()
        server.server_close()
        server.cut_all(timeout=STOP_JOIN_SECONDS)

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


def _peer(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) else "?"


def _shutdown_descriptor(fd: int) -> None:
    """Shut down the connection on `fd` without closing the descriptor (its thread does)."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


def _reason(exc: BaseException) -> str:
    """A refused handshake's reason: OpenSSL's name for it, else the error's kind."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return type(exc).__name__
