"""`watch --git` tells the forge which revision it reconciles (Flux's notification-controller).

On each revision of the spec repository it takes, the watch sets the commit status
`ray-vast/reconcile` on that commit: success when its specs loaded and are reconciled from now
on, failure when they do not load (the previous good specs stay in force). The same statuses as
the pipeline's (`reconciler/forge.py`), from the same variables (GITHUB_REPOSITORY, GITHUB_TOKEN,
GITHUB_API_URL); without them nothing is sent. A status already sent is not sent again, and a
forge that refuses or cannot be reached is logged, never a reason to stop reconciling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from reconciler import forge
from reconciler.errors import RayVastError

CONTEXT = "ray-vast/reconcile"


@dataclass
class RevisionStatus:
    env: Mapping[str, str]
    logger: logging.Logger
    said: tuple[str, str] | None = None

    @property
    def wanted(self) -> bool:
        return bool(self.env.get("GITHUB_REPOSITORY") and self.env.get("GITHUB_TOKEN"))

    def say(self, revision: str | None, state: str, description: str) -> None:
        if not revision or not self.wanted or self.said == (revision, state):
            return
        try:
            where = forge.Forge.from_env({**self.env, "GITHUB_SHA": revision})
            where.status(revision, CONTEXT, state, description)
        except RayVastError as exc:
            self.logger.warning("commit status of %s not set: %s", revision[:12], exc)
            return
        self.said = (revision, state)
