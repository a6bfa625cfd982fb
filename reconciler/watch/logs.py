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


def configure(fmt: str, stream: TextIO, secrets: Iterable[str]) -> logging.Logger:
    """The `ray_vast` logger writing to `stream` in `text` or `json`."""
    logger = logging.getLogger(LOGGER)
    logger.handlers.clear()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(message)s")
    )
    handler.addFilter(Redacting(secrets))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger
