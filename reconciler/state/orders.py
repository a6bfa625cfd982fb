"""The mailbox through which a person's or a pipeline's order reaches the running `watch`.

While `watch` runs it holds the state's lock, and it is the state's one writer (DESIGN.md 11): a
command that would change the state (`pin`, `unpin`, `apply PLAN`, `apply --reviewed`, `down`)
leaves an order instead, in the state's backend, so it works from any machine the state is
shared with. The controller takes the waiting orders at its next loop turn, oldest first,
decides each under its own lease, ledgers it and answers (an exit code and a message); the
command that waits for the answer (`apply`, `down`) says it and exits with its code. An order
that cannot be read is answered as refused, never lost silently; an order withdrawn before it
was taken (its command gave up waiting) is never carried out.

Files here for a state of files (`<state dir>/orders/`, 0600, each written whole), `rv_orders`
for a database (`state/sql/orders.py`).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from reconciler.model.orders import PinOrder
from reconciler.state.files import ensure_private_dir, write_temp

ORDERS_DIR = "orders"
PIN, APPLY, DOWN = "pin", "apply", "down"


@dataclass(frozen=True)
class Order:
    """One order: its kind (pin or apply), what it says, when and by whom it was left."""

    id: str
    kind: str
    body: dict[str, Any]
    at: float
    by: str = ""

    @classmethod
    def new(cls, kind: str, body: dict[str, Any], *, at: float, by: str = "") -> Order:
        return cls(f"{at:017.6f}-{secrets.token_hex(4)}", kind, body, at, by)

    @classmethod
    def pin(cls, order: PinOrder, *, at: float) -> Order:
        return cls.new(PIN, asdict(order), at=at, by=order.who)

    def pin_order(self) -> PinOrder:
        return PinOrder(**self.body)


@dataclass(frozen=True)
class Answer:
    code: int
    message: str


class OrderQueue(Protocol):
    def leave(self, order: Order) -> None: ...

    def waiting(self) -> list[Order | str]:
        """The orders not yet answered, oldest first (an id for one that cannot be read)."""
        ...

    def answer(self, order_id: str, answer: Answer) -> None: ...

    def answer_of(self, order_id: str) -> Answer | None: ...

    def withdraw(self, order_id: str) -> bool:
        """Take back an order not yet answered; False when the controller answered it."""
        ...

    def bell(self, answer_of: str | None = None) -> Ringing | None:
        """What rings when an order is left (`answer_of`: when that one is answered), for a
        waiter to wake at once; None where the waiter polls (files, SQLite)."""
        ...


class Ringing(Protocol):
    def wait(self, seconds: float) -> bool: ...

    def close(self) -> None: ...


class FileOrders:
    """`<state dir>/orders/<id>.json`, answered by `<id>.answer` (the order file removed)."""

    def __init__(self, state_dir: Path) -> None:
        self.folder = state_dir / ORDERS_DIR

    def leave(self, order: Order) -> None:
        ensure_private_dir(self.folder)
        doc = {"id": order.id, "kind": order.kind, "order": order.body, "at": order.at}
        final = self.folder / f"{order.id}.json"
        os.replace(write_temp(final, json.dumps({**doc, "by": order.by}).encode()), final)

    def path_of(self, order_id: str) -> Path:
        return self.folder / f"{order_id}.json"

    def waiting(self) -> list[Order | str]:
        if not self.folder.is_dir():
            return []
        found: list[Order | str] = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                doc = json.loads(path.read_text())
                found.append(Order(path.stem, doc["kind"], dict(doc["order"]), float(doc["at"]),
                                   str(doc.get("by", ""))))  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError):
                found.append(path.stem)
        return found

    def answer(self, order_id: str, answer: Answer) -> None:
        ensure_private_dir(self.folder)
        final = self.folder / f"{order_id}.answer"
        data = json.dumps({"code": answer.code, "message": answer.message}).encode()
        os.replace(write_temp(final, data), final)
        self.path_of(order_id).unlink(missing_ok=True)

    def answer_of(self, order_id: str) -> Answer | None:
        try:
            doc = json.loads((self.folder / f"{order_id}.answer").read_text())
        except (OSError, ValueError):
            return None
        return Answer(int(doc["code"]), str(doc["message"]))

    def bell(self, answer_of: str | None = None) -> Ringing | None:
        return None

    def withdraw(self, order_id: str) -> bool:
        try:
            self.path_of(order_id).rename(self.folder / f"{order_id}.withdrawn")
        except FileNotFoundError:
            return False  # taken and answered meanwhile
        return True
