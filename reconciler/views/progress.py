"""Waiting, shown: a live spinner on a terminal, one plain line otherwise.

Long waits (vast confirming destroys, an apply in flight) get a `rich` status on an interactive
terminal; without a terminal, or with NO_COLOR set, a single plain line says what is awaited, so
CI logs stay readable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TextIO

from rich.console import Console


def live(out: TextIO, env: Mapping[str, str]) -> bool:
    """Whether `out` should get a live display."""
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and "NO_COLOR" not in env and env.get("TERM") != "dumb"


@contextlib.contextmanager
def waiting(message: str, *, out: TextIO, env: Mapping[str, str]) -> Iterator[None]:
    if not live(out, env):
        out.write(f"{message}...\n")
        out.flush()
        yield
        return
    console = Console(file=out, force_terminal=True)
    with console.status(message):
        yield
