"""Keep the API key out of every message, and response bodies short.

The account key is the one secret that can rent machines on the user's card. The client only ever
sends it in the `Authorization` header, but text that reaches an exception or a log line can still
carry it: a response body that echoes the request, a URL a user configured with `?api_key=`, a
proxy's error page. So every piece of text the client turns into a message passes through
`Redactor.scrub` first, and only then is truncated (truncating first could cut a key in half and
leave the half unrecognised).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
DEFAULT_EXCERPT_CHARS = 256

_SECRET_PATTERNS = (
    re.compile(r"(?i)(api_key=)[^&\s\"'<>]+"),
    re.compile(r"(?i)(bearer\s+)[^\s\"'<>,]+"),
)


class Secret:
    """A string that will not show itself in `repr`, `str` or a format string."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    __str__ = __repr__


class Redactor:
    """Scrubs known secrets and secret-shaped fragments out of text."""

    def __init__(
        self, secrets: Iterable[str], *, excerpt_chars: int = DEFAULT_EXCERPT_CHARS
    ) -> None:
        # Longest first, so a secret that contains another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._excerpt_chars = excerpt_chars

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for pattern in _SECRET_PATTERNS:
            text = pattern.sub(lambda m: m.group(1) + MASK, text)
        return text

    def excerpt(self, body: bytes | str) -> str:
        """A scrubbed, single-line, truncated rendering of a response body for a message."""
        text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
        text = " ".join(self.scrub(text).split())
        if len(text) <= self._excerpt_chars:
            return text
        return f"{text[: self._excerpt_chars]}... ({len(text) - self._excerpt_chars} more chars)"
