"""The mailbox through which a person's order reaches a running `watch`.

`watch` holds the state lock for as long as it runs, so a command that changes a record
(`ray-vast pin`) cannot take it. It leaves the order as a file in `<state_dir>/orders/` (0600,
written atomically) instead; the controller takes every order at its next loop turn, decides it
under its own records lock, ledgers it, and removes the file. An order that cannot be read is
moved aside (`*.bad`), never lost silently.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from reconciler.model.orders import PinOrder

ORDERS_DIR = "orders"


def orders_dir(state_dir: Path) -> Path:
    return state_dir / ORDERS_DIR


def leave(state_dir: Path, order: PinOrder, *, at: float) -> Path:
    """Write one order for the running controller; the file appears whole or not at all."""
    folder = orders_dir(state_dir)
    folder.mkdir(mode=0o700, exist_ok=True)
    name = f"{at:017.6f}-{secrets.token_hex(4)}"
    temp = folder / f".{name}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"kind": "pin", "order": asdict(order), "at": at}, out)
        out.flush()
        os.fsync(out.fileno())
    final = folder / f"{name}.json"
    os.replace(temp, final)
    return final


def take(state_dir: Path) -> Iterator[tuple[Path, PinOrder | None]]:
    """The orders waiting, oldest first; None for one that cannot be read (the caller moves it
    aside with `reject`)."""
    folder = orders_dir(state_dir)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            yield path, PinOrder(**doc["order"])
        except (OSError, ValueError, KeyError, TypeError):
            yield path, None


def done(path: Path) -> None:
    path.unlink(missing_ok=True)


def reject(path: Path) -> None:
    path.replace(path.with_suffix(".bad"))
