"""Serving the API on a real socket: a threaded WSGI server in a background thread.

Built on `wsgiref` so the headers are exactly what the application sets (`Content-Type:
application/json`, no charset). A handler that raises `DropConnection` gets its connection closed
with nothing written: the client sees the server hang up, as when vast loses a response. In real
time a second thread steps the simulator so instances move through their statuses by themselves.
"""

from __future__ import annotations

import socketserver
import sys
import threading
from types import TracebackType
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from vastsim.clock import VirtualClock
from vastsim.sim import Sim
from vastsim.wire import DropConnection


class _Handler(ServerHandler):
    """Closes the connection without a response when the application drops it."""

    def handle_error(self) -> None:
        if isinstance(sys.exc_info()[1], DropConnection):
            self.result = None
            return
        super().handle_error()


class _RequestHandler(WSGIRequestHandler):
    def handle(self) -> None:
        self.raw_requestline = self.rfile.readline(65537)
        if len(self.raw_requestline) > 65536:
            self.send_error(414)
            return
        if not self.parse_request():
            return
        handler = _Handler(
            self.rfile,
            self.wfile,  # type: ignore[arg-type]
            self.get_stderr(),
            self.get_environ(),
            multithread=True,
        )
        handler.request_handler = self  # type: ignore[attr-defined]
        handler.run(self.server.get_app())  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True


class Server:
    """A running server; use as a context manager (or call `close()`)."""

    def __init__(
        self,
        sim: Sim,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        step_interval: float = 0.05,
        background_steps: bool | None = None,
        shutdown_sim: bool = True,
    ) -> None:
        self.sim = sim
        self._shutdown_sim = shutdown_sim
        self._httpd = _ThreadingServer((host, port), _RequestHandler)
        self._httpd.set_app(sim.app)
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}"
        sim.base_url = self.url
        self._stop = threading.Event()
        self._serving = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="vastsim-http"
        )
        self._serving.start()
        steps = (
            not isinstance(sim.clock, VirtualClock)
            if background_steps is None
            else background_steps
        )
        self._stepping: threading.Thread | None = None
        if steps:
            self._stepping = threading.Thread(
                target=self._step_loop, args=(step_interval,), name="vastsim-steps"
            )
            self._stepping.start()
        self._closed = False

    def _step_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.sim.step()

    def close(self) -> None:
        """Stop stepping and serving; then (by default) destroy every instance and container."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._stepping is not None:
            self._stepping.join()
        self._httpd.shutdown()
        self._serving.join()
        self._httpd.server_close()
        if self._shutdown_sim:
            self.sim.shutdown()

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def serve(
    sim: Sim,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    step_interval: float = 0.05,
    background_steps: bool | None = None,
    shutdown_sim: bool = True,
) -> Server:
    """Serve `sim.app` on `host:port` (0: a free port) in background threads.

    `background_steps` (default: on for a real clock, off for a virtual one) runs `sim.step()`
    every `step_interval` seconds. Closing the server also shuts the simulator down unless
    `shutdown_sim=False`.
    """
    return Server(
        sim,
        host,
        port,
        step_interval=step_interval,
        background_steps=background_steps,
        shutdown_sim=shutdown_sim,
    )
