"""The environment of every process ray-vast starts: everything but the account's secrets.

The vast API key is read from ray-vast's own environment and never leaves its process (DESIGN.md
section 6: "The account API key never leaves the head"). A child inherits the environment unless
told otherwise, and the Ray head runs every job's entrypoint on the head machine, so a key left in
`ray start`'s environment would be readable by any Ray job. One function builds every child's
environment, so no spawn site can forget it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The account key, the variable vast gives each container for its own instance key, and the
# shared state's URL (it may carry the database's password: a Ray job must not reach the state).
SECRET_VARIABLES = frozenset({"VAST_API_KEY", "CONTAINER_API_KEY", "RAY_VAST_STATE_URL"})


def child_environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without the secrets a child must never hold."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if k not in SECRET_VARIABLES}
