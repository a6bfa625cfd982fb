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
# The library's own loggers (`reconciler.head`, `reconciler.vast.*`): their INFO lines (the head's
# enrollments and refusals) and warnings (the head's alerts, a worker's report before it destroys
# itself, vast's retries and calls with unknown outcomes) reach the same stream, in the same format
# and redacted, instead of being dropped or printed by logging's bare last-resort handler.
LIBRARY_LOGGER = "reconciler"
LOGGERS = (LOGGER, LIBRARY_LOGGER)
EXTRA_FIELDS = ("cluster", "record", "instance", "cls", "net", "gate")


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
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            payload["traceback"] = record.exc_text
        return json.dumps(payload)


class Redacting(logging.Filter):
    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not record.exc_text:
            # the traceback quotes the exception's message, which may name a secret
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if self.secrets:
            record.msg = redact(record.getMessage(), self.secrets)
            record.args = None
            if record.exc_text:
                record.exc_text = redact(record.exc_text, self.secrets)
        return True


RAY_SCHEDULER_LOGGER = "ray.autoscaler.v2.scheduler"


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler `configure` installed (so a second `configure` replaces it, and only it)."""


def configure(
    fmt: str, stream: TextIO, secrets: Iterable[str], *, level: int = logging.INFO
) -> logging.Logger:
    """One logging tree: the watch's `ray_vast` logger and the library's `reconciler` loggers
    (the head, the vast client, the state store) write to `stream` in `text` or `json`, redacted,
    from `level` up (net refusals are at debug). Called again, it replaces what it installed."""
    secrets = tuple(secrets)
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(message)s")
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if isinstance(h, _OurHandler)]:
            logger.removeHandler(old)
        handler = _OurHandler(stream)
        handler.setFormatter(formatter)
        handler.addFilter(Redacting(secrets))
        logger.addHandler(handler)
        logger.setLevel(level)
    # the watch's own lines go nowhere else; the library's may also reach a root handler a host
    # program installed (as before)
    logging.getLogger(LOGGER).propagate = False
    # Ray's scheduler, which packs Ray's demand for the planner, says its reasoning at INFO on
    # every packing ("Adding 1 nodes to satisfy min count..."): what it decides is said by us
    logging.getLogger(RAY_SCHEDULER_LOGGER).setLevel(logging.WARNING)
    return logging.getLogger(LOGGER)
