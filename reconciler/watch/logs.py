"""Logs of `ray-vast watch`: plain lines for people, one JSON object a line for machines.

Secrets never reach a log: every message passes through the same redaction as the ledger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TextIO

from reconciler.state.redact import redact

LOGGER = "ray_vast"
# The library's own loggers (`reconciler.head`, `reconciler.vast.*`): their warnings (the head's
# alerts, a worker's report before it destroys itself, vast calls with unknown outcomes) reach the
# same stream, in the same format and redacted, instead of logging's bare last-resort handler.
LIBRARY_LOGGER = "reconciler"
EXTRA_FIELDS = ("cluster", "record", "instance", "cls", "net")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "time": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in EXTRA_FIELDS:
            if hasattr(record, name):
                payload[name] = getattr(record, name)
        return json.dumps(payload)


class Redacting(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            record.msg = redact(record.getMessage(), self.secrets)
            record.args = None
        return True


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler `configure` installed (so a second `configure` replaces it, and only it)."""


def configure(fmt: str, stream: TextIO, secrets: Iterable[str]) -> logging.Logger:
    """The `ray_vast` logger writing to `stream` in `text` or `json`; the `reconciler` loggers'
    warnings go to the same stream."""
    handler = _OurHandler(stream)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(message)s")
    )
    handler.addFilter(Redacting(secrets))
    logger = logging.getLogger(LOGGER)
    logger.handlers.clear()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    library = logging.getLogger(LIBRARY_LOGGER)
    for old in [h for h in library.handlers if isinstance(h, _OurHandler)]:
        library.removeHandler(old)
    warnings_only = _OurHandler(stream)
    warnings_only.setFormatter(handler.formatter)
    warnings_only.addFilter(Redacting(secrets))
    warnings_only.setLevel(logging.WARNING)
    library.addHandler(warnings_only)
    return logger
