"""The agent schemas compiled to Python, for the messages that pass (nearly all of them).

`jsonschema` walks a schema for every message: about 0.3 ms for a heartbeat, the head's largest
cost per message and a tenth of a fleet simulation's wall time. `fastjsonschema` turns the same
schema into a function once (about 20x faster). It answers only "valid or not"; a message it
refuses goes on to `jsonschema`, which names what is wrong, and which stays the judge: the fast
check may refuse more than the reference, never accept more (`tests/head/test_fastcheck.py`
holds the two side by side on hostile mutations).

Where fastjsonschema is looser than the reference, it is closed here: an integral float
(`1234.0`) is an integer to it, not to the records, so the body is parsed with
`parse_float=Real`, a float that never calls itself integral. (Booleans are not `1` to it.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import fastjsonschema


class Real(float):
    """A JSON number written with a fraction or exponent: never an integer, as in the records."""

    __slots__ = ()

    def is_integer(self) -> bool:
        return False


def compiled(schema: Mapping[str, Any]) -> Callable[[Any], Any]:
    """The check of one schema, as a function (compile once per schema: it writes Python)."""
    return fastjsonschema.compile(dict(schema))


def passes(check: Callable[[Any], Any], doc: Any) -> bool:
    """True only when the compiled check accepts `doc`; anything else (a refusal, or the check
    itself failing on a shape it did not foresee) leaves the verdict to the reference."""
    try:
        check(doc)
    except Exception:
        return False
    return True
