"""The HTTP of the head's two ports: one request of one connection, read within the limits and
routed to the `HeadApp`.

The standard library's HTTP parser reads the request; this module bounds what reaches it first
(`_Handler._head`: the request line 414, the count of header lines and the header bytes 431, with
the port's `Limits`) and the body (`MAX_BODY`, 413), answers every refusal of its own as JSON
(`agent-error.v1.json`), counts it through the server (`TlsServer.refuse`), and after a refusal
answered before the request was read, lingers a little so that closing does not reset the
connection under the answer. What is left is the routing: each port's handler names its routes
(`EnrollHandler`, `HeartbeatHandler`), and a route is one call of the app.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

from reconciler.head.app import Answer, HeadApp, json_answer
from reconciler.head.messages import MAX_BODY
from reconciler.head.server import DeadlineReader, DeadlineWriter, TlsServer, peer

log = logging.getLogger("reconciler.head")


class _Handler(BaseHTTPRequestHandler):
    """One request of one connection, read within the limits, routed to the app. Subclasses name
    the routes of their port."""

    server: TlsServer[HeadApp]
    server_version = "ray-vast-head"
    sys_version = ""
    # a request line without a version is answered with a status line all the same (HTTP/0.9
    # would answer a refusal with a bare body)
    default_request_version = "HTTP/1.0"
    routes: ClassVar[dict[tuple[str, str], str]] = {}

    def __init__(
        self, request: Any, client_address: Any, server: TlsServer[HeadApp], *, deadline: float
    ) -> None:
        self.deadline = deadline
        self.linger = False
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.connection = self.request
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self.deadline))
        self.writer = DeadlineWriter(self.connection, self.deadline)
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
        self.server.refuse(peer(self.client_address), reason, detail)

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


class EnrollHandler(_Handler):
    """The enrollment port (TLS, server-authenticated): enroll, report, the agent download."""

    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/enroll"): "enroll",
        ("POST", "/report"): "report",
        ("GET", "/agent"): "agent",
    }


class HeartbeatHandler(_Handler):
    """Port B (mutual TLS): heartbeats, and resumes with a kept certificate."""

    routes: ClassVar[dict[tuple[str, str], str]] = {
        ("POST", "/heartbeat"): "heartbeat",
        ("POST", "/resume"): "resume",
    }
