"""SIGINT and SIGTERM in every long command (`apply`, `watch`, `up`, `down`; DESIGN.md 9).

The first signal asks the command to stop: the call in flight finishes, the state is saved (it is
saved after every provider call anyway) and the command exits at its next safe point, which it
finds by looking at `stop` (an event: a wait on it wakes at once). A second signal, while the first
is being honoured, warns and exits the process at once (status 128 + the signal): the call in
flight is abandoned, and the next run finds what it did in vast's listing.

The CLI installs one `Interrupts` around each long command; nothing below it installs handlers,
which is why the class lives in `cli`: the command builds it first and hands its `requested` to
the `Deps` it builds, and its `stop` event to the loop (`watch`, `up`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TextIO

SIGNALS = (signal.SIGINT, signal.SIGTERM)

FIRST_DEFAULT = "finishing the call in flight, then saving and stopping"


class Interrupts:
    """The handler of both signals for one command.

    `first` says what the command does on the first signal (e.g. "finishing the tick, then
    stopping"). Messages go to `logger` when the command logs (`watch`, `up`: in the chosen log
    format), else as plain lines to `err`.
    """

    def __init__(
        self,
        *,
        first: str = FIRST_DEFAULT,
        logger: logging.Logger | None = None,
        err: TextIO | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.first = first
        self.logger = logger
        self.err = err
        self.stop = stop if stop is not None else threading.Event()
        self.count = 0

    def requested(self) -> bool:
        """Whether a first signal asked the command to stop (`Deps.stop_requested`)."""
        return self.stop.is_set()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        name = _name(signum)
        if self.count == 1:
            self._say(
                logging.INFO,
                f"{name}: {self.first} (interrupt again to exit at once)",
            )
            self.stop.set()
            return
        self._say(
            logging.WARNING,
            f"{name} again: exiting at once; the call in flight is abandoned (the next run finds "
            "its outcome in vast's listing)",
        )
        self._flush()
        os._exit(128 + signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Both signals handled by this object while the block runs (the main thread only:
        elsewhere Python cannot install handlers, and the caller's stop event is all there is)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _say(self, level: int, text: str) -> None:
        if self.logger is not None:
            self.logger.log(level, "%s", text)
            return
        out = self.err or sys.stderr
        prefix = "Warning: " if level >= logging.WARNING else ""
        out.write(f"\n{prefix}{text}\n")
        out.flush()

    def _flush(self) -> None:
        loggers: list[logging.Logger] = [logging.getLogger()]
        if self.logger is not None:
            loggers.append(self.logger)
        for logger in loggers:
            for handler in logger.handlers:
                with contextlib.suppress(Exception):
                    handler.flush()
        for stream in (self.err, sys.stdout, sys.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.flush()


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
