"""Calling the simulator in-process through httpx, with no socket and no thread.

`InProcessTransport(sim)` is an `httpx.BaseTransport` that builds a WSGI environ and calls
`sim.app` directly, so virtual-time tests and benchmarks run a real httpx client against the exact
same application the socket server serves. A lost response (`DropConnection`) surfaces as
`httpx.RemoteProtocolError`, which is what httpx raises when a server hangs up without answering.
This is the only module of vastsim that imports httpx.
"""

from __future__ import annotations

import io
from typing import Any

import httpx

from vastsim.sim import Sim
from vastsim.wire import DropConnection


class InProcessTransport(httpx.BaseTransport):
    def __init__(self, sim: Sim, *, client_address: str = "127.0.0.1") -> None:
        self.sim = sim
        self.client_address = client_address

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query.decode("ascii"),
            "SERVER_NAME": url.host,
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": self.client_address,
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": url.scheme,
            "wsgi.errors": io.StringIO(),
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in request.headers.items():
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            elif key != "CONTENT_LENGTH":
                environ[f"HTTP_{key}"] = value
        captured: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]]) -> None:
            captured["status"] = int(status.split(" ", 1)[0])
            captured["headers"] = headers

        try:
            chunks = self.sim.app(environ, start_response)
        except DropConnection:
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            ) from None
        content = b"".join(chunks)
        return httpx.Response(
            captured["status"], headers=captured["headers"], content=content, request=request
        )
