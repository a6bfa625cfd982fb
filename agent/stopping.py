"""The agent's words in the money chain's stop handshake (DESIGN.md 11). Pure, standard library.

Ray ends a drained idle raylet at once, and vast carries a stop out seconds after the call: an
agent that learnt of the stop only from vast's TERM would see Ray exit first and end as
`ray_exited` (a destroy, the disk lost). So the head tells it first, in its heartbeat answers:

    "stop": "pending"     the head recorded intent stopped. The agent acknowledges at once (a
                          heartbeat with "stop": "acknowledged", and every one after it until the
                          stop or its cancellation); from then on Ray's exit is part of the stop
                          (the head drains the node through Ray, then calls vast's stop), and the
                          TERM that follows is reported and answered "deliberate stop" as before
    "stop": "cancelled"   the stop was called off before vast's stop (Ray rejected the drain:
                          work is there; traffic; demand): the worker serves on. An answer that
                          says nothing of a stop means the same to an agent that waited for one

If Ray has exited for the stop and no TERM comes within `worker_gives_up_after` seconds, or the
stop is called off after Ray has gone, the worker ends as `ray_exited`, as the seed says of a
worker whose Ray is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PENDING = "pending"
CANCELLED = "cancelled"
ACKNOWLEDGED = "acknowledged"


def word(doc: Any) -> str | None:
    """What a heartbeat answer says of a stop: "pending", "cancelled", or None."""
    if not isinstance(doc, Mapping):
        return None
    said = doc.get("stop")
    return said if said in (PENDING, CANCELLED) else None
