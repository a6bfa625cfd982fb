"""Routes: method + path template -> handler, with the auth level each route needs.

Route keys (`"PUT /api/v0/asks/{id}/"`) are how the request log, the counters, the rate limiter
and the fault injector name an endpoint. `{id}` and `{key_id}` match digits only, so
`/instances/reboot/5/` never matches `/instances/{id}/`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vastsim.wire import Request, Response

AuthLevel = Literal["public", "optional", "account", "own", "admin"]


@dataclass(frozen=True)
class Identity:
    """Who is calling: the account, one instance's scoped key, nobody, or a key vast rejects."""

    kind: Literal["account", "instance", "none", "bad"]
    instance_id: int | None = None


Handler = Callable[[Request, dict[str, str], Identity, float], Response]

_PARAM = re.compile(r"\{(\w+)\}")
_PARAM_PATTERNS = {"id": r"\d+", "key_id": r"\d+", "token": r"[A-Za-z0-9_-]+", "name": r"\w+"}


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    handler: Handler
    auth: AuthLevel
    pattern: re.Pattern[str]

    @property
    def key(self) -> str:
        return f"{self.method} {self.template}"

    @property
    def control(self) -> bool:
        return self.auth == "admin"


def route(method: str, template: str, handler: Handler, auth: AuthLevel) -> Route:
    regex = ""
    pos = 0
    for found in _PARAM.finditer(template):
        name = found.group(1)
        regex += re.escape(template[pos : found.start()])
        regex += f"(?P<{name}>{_PARAM_PATTERNS.get(name, '[^/]+')})"
        pos = found.end()
    regex += re.escape(template[pos:])
    return Route(method, template, handler, auth, re.compile(f"^{regex}$"))


class Router:
    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
        """(route, params, path_known): path_known without a route means 405."""
        path_known = False
        for candidate in self.routes:
            found = candidate.pattern.match(path)
            if found is None:
                continue
            path_known = True
            if candidate.method == method:
                return candidate, found.groupdict(), True
        return None, {}, path_known
