"""The thread that keeps a lease: renewed every third of its length until it is stopped or lost
(a lost lease's beacon is given back at once, so the proof that its holder is gone does not wait
for the process to end)."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from reconciler.state.errors import LockLostError, StateError
from reconciler.state.sql.link import Link

_log = logging.getLogger("reconciler.state.sql.lease")


class Renewed(Protocol):
    """What the keeper asks of its lease."""

    link: Link
    seconds: float

    def renew(self) -> None: ...

    @property
    def lost(self) -> bool: ...

    def let_go(self) -> None: ...


class Keeper:
    """The thread that renews a lease every third of its length until stopped."""

    def __init__(self, lease: Renewed) -> None:
        self._lease = lease
        self._stopped = threading.Event()
        name = f"lease {lease.link.workspace}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stopped.wait(self._lease.seconds / 3):
            try:
                self._lease.renew()
            except LockLostError:
                pass  # said where the process stops (the next check raises it again)
            except StateError as exc:
                _log.warning("%s: %s", self._lease.link.where, exc)
            if self._lease.lost:
                self._lease.let_go()
                return
