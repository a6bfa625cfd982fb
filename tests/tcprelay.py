"""A TCP relay between a client and a server that can cut the path the way a network partition
does: `blackhole()` keeps every connection open and carries no byte either way (nothing is
refused or reset, so neither end learns anything until its own timer says so); `heal()` carries
them again. A stopped server is not a partition: its port refuses at once, and the kernel tells
the client; here nobody tells anybody.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Iterator


class Relay:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopped = threading.Event()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def blackhole(self) -> None:
        """Carry nothing from now on (bytes in flight stay in the sockets' buffers)."""
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._stopped.set()
        self._flowing.set()
        self._listener.close()
        with self._lock:
            for pair in self._pairs:
                for end in pair:
                    with contextlib.suppress(OSError):
                        end.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
            thread = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Carry bytes both ways until one end closes; then the other is closed too (as the
        peer's reset reaches a client once a healed path carries it)."""
        try:
            self._carry(client, server)
        finally:
            for end in (client, server):
                with contextlib.suppress(OSError):
                    end.close()

    def _carry(self, client: socket.socket, server: socket.socket) -> None:
        other = {client: server, server: client}
        with selectors.DefaultSelector() as selector:
            for end in other:
                selector.register(end, selectors.EVENT_READ)
            while not self._stopped.is_set():
                if not self._flowing.wait(0.1):
                    continue  # partitioned: leave the bytes where they are
                for key, _ in selector.select(timeout=0.1):
                    end: socket.socket = key.fileobj  # type: ignore[assignment]
                    if not self._flowing.is_set():
                        break
                    try:
                        data = end.recv(65536)
                        if not data:
                            return
                        other[end].sendall(data)
                    except OSError:
                        return


@contextlib.contextmanager
def relay(target: tuple[str, int]) -> Iterator[Relay]:
    made = Relay(target)
    try:
        yield made
    finally:
        made.close()
