"""The self-destroy call: `DELETE /api/v0/instances/<own id>/` with the instance's own key.

When to call it, how often and what comes before it (report first, stop Ray, retry every
`self_destroy_retry` seconds until vast confirms, never exit) is decided by `agent.lifecycle`;
this module is the call itself and how its answer is read, so the real agent and the virtual-time
harness read vast's answer the same way: 200 (unless it says `success: false`), or 404 /
`no_such_instance` (already gone) is a confirmation; anything else, and no answer, is not.
The account API key never reaches a container: this key may destroy this instance and nothing
else.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from agent import transport
from agent.config import Settings

GONE_ERRORS = frozenset({"no_such_instance", "not_found"})


def disarm_signals(log: Callable[[str], None]) -> None:
    """From here on TERM, INT and HUP change nothing: the ending is already under way."""

    def note(signum: int, frame: Any) -> None:
        log(f"signal {signal.Signals(signum).name} while ending: ignored")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)


def destroy_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.instance_key}"}


def destroy_outcome(reply: transport.Reply) -> tuple[bool, str]:
    """(vast confirmed the instance is gone, what happened) from vast's answer to the DELETE."""
    if reply.status == 200:
        success = not isinstance(reply.doc, dict) or reply.doc.get("success", True) is not False
        return success, f"200 {reply.doc}"
    if reply.status == 404 or reply.error() in GONE_ERRORS:
        return True, f"already gone ({reply.status})"
    return False, reply.describe()


def destroy_once(settings: Settings, *, timeout: float) -> tuple[bool, str]:
    """One destroy call: (vast confirmed it, what happened)."""
    try:
        reply = transport.request(
            settings.destroy_url,
            method="DELETE",
            body={},
            headers=destroy_headers(settings),
            timeout=timeout,
            source=settings.source_ip,
        )
    except transport.TransportError as exc:
        return False, f"no answer: {exc}"
    return destroy_outcome(reply)
