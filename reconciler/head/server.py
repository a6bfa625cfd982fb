"""A TLS HTTP server bounded for a port that faces the internet: caps, deadlines, linger.

It knows nothing of enrollment. What it serves is its handler's business (`head/handlers.py`
routes to the `HeadApp`), and what it refuses goes to a sink it is given (`head/refusals.py`).
It exists so that nothing that reaches a port can flood it or hold it (`Limits`):

- connections: at most `per_source` at once from one address and `total` per port. The accept loop
  counts them and closes one beyond a cap at once: no thread, no handshake. Each admitted
  connection gets one thread, which does the handshake (never the accept loop, so a slow peer
  holds up nobody) and the one request; every answer closes its connection;
- time: the handshake, then the request's head and body, must be complete within a deadline
  counted from the accept (`handshake_seconds`, `request_seconds`), however slowly the bytes come:
  a socket timeout per read would let a peer that sends a byte a second hold a thread forever, so
  every read is given only what is left of the deadline (`DeadlineReader`). The answer has its own
  (`write_seconds`, `DeadlineWriter`);
- size: the handler bounds the request line, the count of header lines and the header bytes
  before the standard library parses them, with the limits read here.

Every refusal the server makes (a cap, a handshake) is handed to its `refuse` sink with the
port's name; so are the handler's (`TlsServer.refuse`). While the server closes, what it cuts is
not a peer's fault, and nothing is handed on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import HTTPServer
from socketserver import BaseRequestHandler
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

log = logging.getLogger("reconciler.head")

AppT = TypeVar("AppT")
# What serves one admitted connection, called as `handler(connection, client_address, server,
# deadline=...)`: a `BaseHTTPRequestHandler` that reads within the deadline (`head/handlers.py`).
Handler = Callable[..., BaseRequestHandler]
# Where refusals go: (port, peer, reason, detail). It must never block.
RefusalSink = Callable[[str, str, str, str], None]


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
# The listen backlog: a burst of connections waits in the kernel for the accept loop, rather
# than in SYN retransmits a second or more later.
LISTEN_BACKLOG = 1024
# How long `stop` waits for the connections it cut to end.
STOP_JOIN_SECONDS = 5.0
# The accept loop looks for `close` this often (socketserver's default is 0.5 s; each head stop
# waited for it, twice: 7 s of the fast lane's wall time were head services stopping).
SHUTDOWN_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Port:
    """One port to bind: its name (in refusals and thread names), its number (0: a free one),
    what serves its connections and the TLS they speak."""

    name: str
    number: int
    handler: Handler
    context: ssl.SSLContext


class TlsServer(HTTPServer, Generic[AppT]):
    """An HTTP server whose connections are admitted by `Limits` in the accept loop, then wrapped
    in TLS and served in a thread each. `app` is for the handler; the server never reads it."""

    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: Handler,
        *,
        context: ssl.SSLContext,
        app: AppT,
        name: str,
        refuse: RefusalSink,
        limits: Limits,
    ) -> None:
        self.handler = handler
        self.context = context
        self.app = app
        self.name = name
        self._sink = refuse
        self.limits = limits
        self._lock = threading.Lock()
        self._by_source: Counter[str] = Counter()
        # the thread of each admitted connection, and its socket's descriptor (for `cut_all`)
        self._open: dict[threading.Thread, int] = {}
        self.closing = False  # set by `cut_all`: what it cuts is not a peer's fault
        self._serving: threading.Thread | None = None
        super().__init__(address, handler)

    @property
    def port(self) -> int:
        """The port bound (the one picked, for 0)."""
        sock: socket.socket = self.socket
        return int(sock.getsockname()[1])

    # --- the accept loop -------------------------------------------------------------------

    def process_request(self, request: Any, client_address: Any) -> None:
        """In the accept loop: admit the connection within the caps (a thread of its own) or
        close it at once."""
        source = peer(client_address)
        refused = self._admit(source)
        if refused is not None:
            self.refuse(source, *refused)
            self.shutdown_request(request)
            return
        deadline = time.monotonic() + self.limits.request_seconds
        thread = threading.Thread(
            target=self._connection,
            args=(request, client_address, source, deadline),
            name=f"rv-head-{self.name}-conn",
            daemon=True,
        )
        with self._lock:
            self._open[thread] = request.fileno()
        try:
            thread.start()
        except BaseException:
            self._release(thread, source)
            self.shutdown_request(request)
            raise

    def _admit(self, source: str) -> tuple[str, str] | None:
        limits = self.limits
        with self._lock:
            if len(self._open) >= limits.total:
                return "total_cap", f"too many connections to this port ({limits.total})"
            if self._by_source[source] >= limits.per_source:
                return "source_cap", f"too many connections from this address ({limits.per_source})"
            self._by_source[source] += 1
            return None

    def _release(self, thread: threading.Thread, source: str) -> None:
        with self._lock:
            self._open.pop(thread, None)
            self._by_source[source] -= 1
            if self._by_source[source] <= 0:
                del self._by_source[source]

    # --- one connection, in its own thread -------------------------------------------------

    def _connection(
        self, request: socket.socket, client_address: Any, source: str, deadline: float
    ) -> None:
        connection: ssl.SSLSocket | None = None
        try:
            connection = self.context.wrap_socket(
                request, server_side=True, do_handshake_on_connect=False
            )
            if self._handshake(connection, source, deadline):
                self.handler(connection, client_address, self, deadline=deadline)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            # Deregistered before the descriptor is closed: `cut_all` never shuts down a
            # descriptor the system has given to something else since.
            self._release(threading.current_thread(), source)
            if connection is not None:
                with contextlib.suppress(OSError):
                    connection.close()
            self.shutdown_request(request)

    def _handshake(self, connection: ssl.SSLSocket, source: str, deadline: float) -> bool:
        left = min(self.limits.handshake_seconds, deadline - time.monotonic())
        try:
            connection.settimeout(max(left, 0.001))
            connection.do_handshake()
        except TimeoutError:
            self.refuse(source, "tls:timeout", "handshake not done in time")
            return False
        except (ssl.SSLError, OSError) as exc:
            detail = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else str(exc)
            self.refuse(source, f"tls:{_reason(exc)}", detail or _reason(exc))
            return False
        return True

    def refuse(self, source: str, reason: str, detail: str) -> None:
        if not self.closing:
            self._sink(self.name, source, reason, detail)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("head %s port: error serving %s", self.name, client_address, exc_info=True)

    # --- its lifecycle ---------------------------------------------------------------------

    def open_connections(self) -> int:
        with self._lock:
            return len(self._open)

    def serve_in_thread(self) -> None:
        """Run the accept loop in a thread of its own, until `close`."""
        self._serving = threading.Thread(
            target=self.serve_forever,
            # how soon `close` is noticed: a stop (a reload, a test's teardown) waits for it
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            name=f"rv-head-{self.name}",
            daemon=True,
        )
        self._serving.start()

    def close(self) -> None:
        """Stop the accept loop, close the port and cut every admitted connection (once)."""
        if self.socket.fileno() < 0:
            return
        if self._serving is not None and self._serving.is_alive():
            self.shutdown()
        self.server_close()
        self.cut_all(timeout=STOP_JOIN_SECONDS)

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` for the accept loop's thread to end."""
        if self._serving is not None:
            self._serving.join(timeout=timeout)
            self._serving = None

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


def bind(
    host: str, ports: Sequence[Port], *, app: AppT, refuse: RefusalSink, limits: Limits
) -> list[TlsServer[AppT]]:
    """A server on each of `ports`, all bound or none (the ones bound before a failure are
    closed again)."""
    servers: list[TlsServer[AppT]] = []
    try:
        for port in ports:
            servers.append(
                TlsServer(
                    (host, port.number),
                    port.handler,
                    context=port.context,
                    app=app,
                    name=port.name,
                    refuse=refuse,
                    limits=limits,
                )
            )
    except BaseException:
        for server in servers:
            server.server_close()
        raise
    return servers


class DeadlineReader(io.RawIOBase):
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


class DeadlineWriter(io.BufferedIOBase):
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


def peer(client_address: Any) -> str:
    """The source address of a connection, as refusals are counted by."""
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
