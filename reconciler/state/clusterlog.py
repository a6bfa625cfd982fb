"""One cluster's log: a line in the process log and the same fact in the ledger, in one call.

kopf's object logger posts a log line and a Kubernetes event together, so what an operator reads
in the log and what the object's history keeps never drift apart. Here the history is the ledger:
a tick that failed, a cluster that ticks again, a stop called off; `note` writes both, with the
cluster (and record) in the log line's `extra` for the JSON log format, and `say` writes only the
log line (a repeat the ledger already has once).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerSink


@dataclass(frozen=True)
class ClusterLog:
    cluster: str
    ledger: LedgerSink
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("ray_vast"))

    def say(
        self,
        level: int,
        cls: str,
        line: str,
        *,
        record: str | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        """The log line alone: `cluster: line`."""
        extra = {"cluster": self.cluster, "cls": cls, "record": record}
        self.logger.log(level, "%s: %s", self.cluster, line, exc_info=exc_info, extra=extra)

    def note(
        self,
        level: int,
        cls: str,
        line: str,
        *,
        ledger: str | None = None,
        kind: LedgerKind = LedgerKind.NOTE,
        record: str | None = None,
        instance: int | None = None,
        data: Mapping[str, Any] | None = None,
        exc_info: BaseException | None = None,
    ) -> None:
        """The log line and the ledger line (`ledger`: its own words, else the log's)."""
        self.say(level, cls, line, record=record, exc_info=exc_info)
        message = line if ledger is None else ledger
        event = LedgerEvent(
            self.cluster, kind, cls, message, record, instance, None, dict(data or {})
        )
        self.ledger.append(event)
