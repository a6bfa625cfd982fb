"""What the head's ports refused before the app: counted, and noted off the serving threads.

Every refusal a port makes (a cap, a handshake, a request's deadline or head, a route that does
not exist) is counted in memory by (port, reason) (`HeadService.refusals`) and handed to the
app's `refused_handshake`, which notes refusals in aggregate (a ledger line a minute at most per
source and class). The hand-over goes through a bounded queue and a thread of its own, so neither
the accept loop nor a connection ever waits for the records lock or the ledger's fsync; a flood
beyond the queue is counted and not noted (`unnoted`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable

from reconciler.head.server import STOP_JOIN_SECONDS

log = logging.getLogger("reconciler.head")

# Refusals waiting for the app's note, at most; beyond, they are counted and not noted.
NOTE_BACKLOG = 10_000


class Refusals:
    """Refused connections and requests: counted by (port, reason), and handed to `note`
    (port, peer, detail: the app's `refused_handshake`) in order by one thread (`start`,
    `stop`)."""

    def __init__(self, note: Callable[[str, str, str], None]) -> None:
        self._note = note
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
        self._thread = threading.Thread(target=self._run, name="rv-head-refusals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Note what is queued, then end the thread."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=STOP_JOIN_SECONDS)
        self._thread.join(timeout=STOP_JOIN_SECONDS)
        self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            port, peer, detail = item
            try:
                self._note(port, peer, detail)
            except Exception:
                log.exception("head %s port: noting a refusal of %s failed", port, peer)
