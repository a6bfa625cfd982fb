"""Keep known secrets out of everything the state directory holds.

The state and the ledger are plain files that people copy into bug reports and CI artifacts, so
they must never carry the vast API key (DESIGN.md section 9). The stores and the ledger writer
cannot know which strings are secret; their callers do, and hand them over once. Every write then
passes its whole payload through `redact`: strings anywhere in it, dictionary keys included, have
each secret replaced by `***`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

MASK = "***"

T = TypeVar("T")
_SCALARS = frozenset({int, float, bool, type(None)})


def normalise_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """Non-empty secrets, longest first, so one that contains another is masked whole."""
    return tuple(sorted({s for s in secrets if s}, key=len, reverse=True))


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def _walk(value: Any, secrets: tuple[str, ...]) -> Any:
    # the exact types first: the state is millions of these, and an ABC check costs ten times
    # a type comparison (a third of the fast lane's time was spent walking saved states)
    kind = type(value)
    if kind is str:
        return _scrub(value, secrets)
    if kind is dict:
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if kind is list:
        return [_walk(v, secrets) for v in value]
    if kind in _SCALARS:
        return value
    if isinstance(value, str):
        return _scrub(value, secrets)
    if isinstance(value, Mapping):
        return {_walk(k, secrets): _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_walk(v, secrets) for v in value)
    return value


def redact(value: T, secrets: Iterable[str]) -> T:
    """`value` with every secret masked; strings, mappings, lists and tuples are walked.

    Other values (numbers, booleans, None) are returned as they are. Mappings come back as plain
    dicts, which is what the JSON writers want.
    """
    known = normalise_secrets(secrets)
    if not known:
        return value
    result: T = _walk(value, known)
    return result
