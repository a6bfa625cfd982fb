"""Ray's autoscaler events for the head's drivers: the demand no node type can serve (issue 24).

A Ray user learns that a demand is infeasible from the driver: `(autoscaler +3s) No available
node types can fulfill resource requests {'TPU': 1.0}*1. Add suitable node types to this cluster
to resolve this issue.` Under autoscaler v2 (the state ray-vast's heads run with) Ray's autoscaler
writes those lines with its own event logger (`ray/autoscaler/v2/event_logger.py`) into the
head's `logs/events/event_AUTOSCALER.log`, and the head's log monitor publishes that file to
every driver. ray-vast is the head's autoscaler (its own monitor is off), so it writes the same
events, with Ray's own logger, only for the demand ray-vast's packing could place on no node type
(`ray status` of Ray 2.60 shows such demand only under "Pending Demands": its v2 formatter does not
print infeasible requests yet). A demand ray-vast is renting for is never said infeasible.

The same demand is said again only after 30 s, as Ray's v1 autoscaler repeats an event
(`add_once_per_interval`); a head whose logs are not on this machine (a watch that runs elsewhere)
gets none, which is what Ray's drivers see when no autoscaler writes events.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler.model.demand import Unmet
from reconciler.watch import rayreport

REPEAT_AFTER = 30.0  # seconds before the same demand is said again (Ray's v1 event interval)
EVENTS_FILE = os.path.join("events", "event_AUTOSCALER.log")  # below the head's logs directory

log = logging.getLogger("ray_vast")


@dataclass
class DriverEvents:
    """One cluster's events, written into its head's event file."""

    cluster: str
    _said: dict[str, float] = field(default_factory=dict)  # demand's words -> when said
    _logger: logging.Logger | None = None
    _into: str | None = None  # the events file the logger writes

    def infeasible(
        self, unmet: Sequence[Unmet], now: float, logs_dir: Callable[[], str | None]
    ) -> None:
        """Say the demand not said in the last 30 s; `logs_dir`: the head's (None: not here)."""
        current = {u.words(): u for u in unmet}
        self._said = {w: t for w, t in self._said.items() if w in current}
        due = [
            u for w, u in current.items() if now - self._said.get(w, float("-inf")) >= REPEAT_AFTER
        ]
        if not due:
            return
        where = logs_dir()
        if where is None:
            return
        said = rayreport.infeasible(due)
        from ray.autoscaler.v2.event_logger import AutoscalerEventLogger  # noqa: PLC0415

        AutoscalerEventLogger(
            self._events(where), log_cluster_shape=False
        ).log_cluster_scheduling_update(
            cluster_resources={},
            infeasible_requests=said.requests,
            infeasible_gang_requests=said.gangs,
            infeasible_cluster_resource_constraints=said.constraints,
        )
        self._said.update({u.words(): now for u in due})

    def close(self) -> None:
        """The event file closed (a reader dropped: its cluster removed, its head moved)."""
        if self._logger is not None:
            for handler in list(self._logger.handlers):
                self._logger.removeHandler(handler)
                handler.close()
        self._logger = self._into = None

    def _events(self, logs_dir: str) -> Any:
        """Ray's event logger over this cluster's file (made again when the head's session, and
        so its logs directory, changed)."""
        from ray._private.event.event_logger import EventLoggerAdapter  # noqa: PLC0415
        from ray.core.generated.event_pb2 import Event  # type: ignore[attr-defined]  # noqa: PLC0415

        path = os.path.join(logs_dir, EVENTS_FILE)
        if self._logger is None or self._into != path:
            self._logger = _file_logger(self.cluster, path)
            self._into = path
        return EventLoggerAdapter(Event.SourceType.AUTOSCALER, self._logger)


def _file_logger(cluster: str, path: str) -> logging.Logger:
    """A logger that writes bare lines to `path` and nowhere else (Ray's event file logger is
    one per process; a watch serves several clusters' heads)."""
    logger = logging.getLogger(f"ray_vast.ray_events.{cluster}")
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger
