"""What a person asks of the controller by hand: a pin or an unpin of one machine.

Plain data, in the model because three layers pass it along: the CLI builds it, the state's
orders queue carries it to a running `watch`, and the planner's `pins.decide` carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PinOrder:
    """What a person asked: pin (for `seconds`, None: until unpinned) or unpin, who and why."""

    target: str
    who: str
    reason: str | None = None
    seconds: float | None = None
    unpin: bool = False
