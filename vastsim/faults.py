"""Fault injection: everything that goes wrong on vast.ai, on demand.

Response faults answer in place of (or after) the real handler for one route key
(`"PUT /api/v0/asks/{id}/"`, or `"*"` for every API route): 429 storms in each shape vast uses,
5xx with HTML bodies, and lost responses (the handler runs, then the connection is closed without
an answer). Listing faults hide an instance from the next K listings, make one page of a listing
fail, or make a listing come back empty. Instance and host faults change the life cycle at a time:
exited, offline, unknown, OCI create failure, never booting, a public IP change, a spot outbid,
or somebody else renting the GPUs of a stopped instance.

Every method is reachable from Python (`sim.faults.rate_limit(...)`) and over HTTP
(`POST /_sim/faults/<method>` with the keyword arguments as a JSON object, admin key required).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vastsim.instances import Instance
from vastsim.ratelimit import RateLimiter, too_many_requests
from vastsim.wire import JSON, Response, html_error, json_response

if TYPE_CHECKING:
    from vastsim.world import World

ANY_ROUTE = "*"
CREATE_ROUTE = "PUT /api/v0/asks/{id}/"
LIST_ROUTE = "GET /api/v1/instances/"


@dataclass
class Canned:
    """An injected answer. `response` None: drop the connection. `after`: run the handler first."""

    response: Response | None
    remaining: int
    after: bool


class Faults:
    """The fault-injection API of one simulator."""

    HTTP_METHODS = frozenset(
        {
            "respond",
            "rate_limit",
            "server_error",
            "lose_response",
            "lose_create_response",
            "slow",
            "hide_instance",
            "hide_new_instances",
            "fail_listing",
            "empty_listing",
            "auth_status",
            "enable_rate_limits",
            "disable_rate_limits",
            "exit_instance",
            "offline",
            "unknown",
            "heard_again",
            "oci_failure",
            "never_boots",
            "change_ip",
            "outbid",
            "take_gpus",
            "free_gpus",
            "clear",
        }
    )

    def __init__(self, sim: World) -> None:
        self._sim = sim
        self._lock = threading.Lock()
        self._canned: dict[str, list[Canned]] = {}
        self._empty_listings = 0
        self._failing_pages: list[list[int]] = []  # [page, status, remaining]
        self._slow: dict[str, list[list[float]]] = {}  # route -> [[seconds, remaining], ...]
        self.limiter = RateLimiter()
        self.auth_error_status = 401

    # -- response faults ------------------------------------------------------------------------

    def respond(
        self,
        route: str,
        *,
        status: int,
        body: Any = None,
        content_type: str = JSON,
        headers: dict[str, str] | None = None,
        count: int = 1,
        after: bool = False,
    ) -> None:
        """Answer the next `count` requests to `route` with this response (JSON-encoded `body`
        unless it is a str)."""
        if isinstance(body, str):
            response = Response(status, body.encode(), content_type, tuple((headers or {}).items()))
        else:
            base = json_response(body, status)
            response = Response(status, base.body, content_type, tuple((headers or {}).items()))
        self._add(route, Canned(response, count, after))

    def rate_limit(
        self,
        route: str = ANY_ROUTE,
        count: int = 1,
        *,
        style: str = "text",
        retry_after: float | None = None,
        threshold: float = 1.0,
    ) -> None:
        """The next `count` requests to `route` get a 429. Styles: "text" (plain text),
        "detail" (`{"detail": ...}`), "json" (`rate_limit_exceeded`), "quota"
        (`search_quota_exceeded` with `X-RateLimit-Reset`)."""
        reset = self._sim.clock.now() + 86_400.0
        response = too_many_requests(style, threshold, retry_after, reset)
        self._add(route, Canned(response, count, after=False))

    def server_error(
        self, route: str = ANY_ROUTE, count: int = 1, *, status: int = 500, after: bool = False
    ) -> None:
        """The next `count` requests get a 5xx with an HTML body (`after`: the request is carried
        out first, as when a gateway times out on a slow backend)."""
        self._add(route, Canned(html_error(status), count, after))

    def lose_response(self, route: str, count: int = 1) -> None:
        """The next `count` requests to `route` are carried out, then the connection is closed
        without a response."""
        self._add(route, Canned(None, count, after=True))

    def lose_create_response(self, count: int = 1) -> None:
        """A create succeeds (the instance exists and bills) but its response is lost."""
        self.lose_response(CREATE_ROUTE, count)

    def slow(self, route: str = ANY_ROUTE, seconds: float = 1.0, count: int = 1) -> None:
        """The next `count` requests to `route` are answered `seconds` of real time late, as by a
        slow backend (each waits on its own connection; other requests are not held up)."""
        if count < 1 or seconds < 0:
            raise ValueError("count must be at least 1 and seconds not negative")
        with self._lock:
            self._slow.setdefault(route, []).append([float(seconds), float(count)])

    def lateness(self, route: str) -> float:
        """How long the request to `route` arriving now waits before it is handled (used by the
        API, outside the simulator's lock)."""
        with self._lock:
            for key in (route, ANY_ROUTE):
                for entry in self._slow.get(key, []):
                    if entry[1] > 0:
                        entry[1] -= 1
                        return entry[0]
        return 0.0

    def slow_left(self, route: str) -> int:
        """How many of the requests `slow` was told to hold up for `route` have not arrived yet
        (a test waits on it to act while a request is provably in flight)."""
        with self._lock:
            return sum(int(entry[1]) for entry in self._slow.get(route, []))

    def heal(self, route: str) -> None:
        """The injected answers for `route` not yet given are dropped: the backend recovered."""
        with self._lock:
            self._canned.pop(route, None)

    def _add(self, route: str, canned: Canned) -> None:
        if canned.remaining < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._canned.setdefault(route, []).append(canned)

    def take(self, route: str, *, after: bool) -> Canned | None:
        """Consume the next injected answer for `route` in the given phase (used by the API)."""
        with self._lock:
            for key in (route, ANY_ROUTE):
                for canned in self._canned.get(key, []):
                    if canned.after == after and canned.remaining > 0:
                        canned.remaining -= 1
                        return canned
        return None

    # -- listing faults -------------------------------------------------------------------------

    def hide_instance(self, instance_id: int, listings: int = 1) -> None:
        """The instance is missing from the next `listings` listings (all their pages)."""

        def hide(now: float) -> None:
            self._instance(instance_id).hidden_listings = listings

        self._sim.mutate(hide)

    def hide_new_instances(self, listings: int = 1) -> None:
        """Every instance created from now on is missing from its first `listings` listings
        (eventual consistency); 0 turns it off."""

        def set_hidden(now: float) -> None:
            self._sim.fleet.hide_new_listings = listings

        self._sim.mutate(set_hidden)

    def empty_listing(self, count: int = 1) -> None:
        """The next `count` listings come back empty (success, no instances, no next_token)."""
        with self._lock:
            self._empty_listings += count

    def fail_listing(self, page: int = 1, status: int = 500, count: int = 1) -> None:
        """Page `page` (1-based) of the next `count` listings fails with `status` (HTML body)."""
        with self._lock:
            self._failing_pages.append([page, status, count])

    def listing_fault(self, page: int) -> Response | None:
        """Used by the listing route: an injected answer for this page, if any."""
        with self._lock:
            for entry in self._failing_pages:
                if entry[0] == page and entry[2] > 0:
                    entry[2] -= 1
                    return html_error(entry[1])
            if page == 1 and self._empty_listings > 0:
                self._empty_listings -= 1
                return json_response(
                    {
                        "success": True,
                        "instances_found": 0,
                        "total_instances": 0,
                        "label_counts": {},
                        "next_token": None,
                        "instances": [],
                    }
                )
        return None

    # -- auth and rate limits ---------------------------------------------------------------------

    def auth_status(self, status: int) -> None:
        """HTTP status of `auth_error` answers: 401 (documented) or 404 (what vast often does)."""
        if status not in (401, 403, 404):
            raise ValueError("auth status must be 401, 403 or 404")
        self.auth_error_status = status

    def enable_rate_limits(
        self, thresholds: dict[str, float] | None = None, style: str = "detail"
    ) -> None:
        """Per-endpoint minimum intervals (default: vast's documented thresholds)."""
        self.limiter.enable(thresholds, style)

    def disable_rate_limits(self) -> None:
        self.limiter.disable()

    # -- instance and host faults ---------------------------------------------------------------

    def exit_instance(self, instance_id: int, *, at: float | None = None, code: int = 1) -> None:
        """The container exits and stays down: `actual_status` becomes `exited`."""
        self._on_instance(instance_id, at, lambda i, t: self._sim.fleet.exit_container(i, t, code))

    def offline(
        self,
        instance_id: int | None = None,
        *,
        machine_id: int | None = None,
        at: float | None = None,
    ) -> None:
        """The host goes offline (every instance on it becomes `offline`, its offers vanish)."""
        fleet = self._sim.fleet
        if machine_id is not None:
            machine = self._sim.market.machine(machine_id)
            self._at(at, lambda t: fleet.machine_offline(machine, t))
        elif instance_id is not None:
            self._on_instance(instance_id, at, lambda i, t: fleet.machine_offline(i.machine, t))
        else:
            raise ValueError("give instance_id or machine_id")

    def unknown(self, instance_id: int, *, at: float | None = None) -> None:
        """vast loses the host's heartbeat: `actual_status` becomes `unknown`."""
        self._on_instance(instance_id, at, self._sim.fleet.go_unknown)

    def heard_again(self, instance_id: int, *, at: float | None = None) -> None:
        """vast hears the host again (`unknown` ends): the instance is listed `running`."""
        self._on_instance(instance_id, at, self._sim.fleet.heard_again)

    def oci_failure(self, machine_id: int | None = None, *, instance_id: int | None = None) -> None:
        """Docker cannot create the container: stuck in `created` with an OCI error message.
        A machine: every later rental on it; an instance: that one, if not yet created."""

        def apply(now: float) -> None:
            if machine_id is not None:
                self._sim.fleet.set_traits(self._sim.market.machine(machine_id), oci_failure=True)
            if instance_id is not None:
                self._instance(instance_id).force_oci_failure = True

        self._sim.mutate(apply)

    def missing_image(self, image: str) -> None:
        """No registry has `image` (a bad tag): every later pull of it fails at once with
        Docker's "Error response from daemon: manifest ... unknown"; the instance stays
        `loading` with that message."""
        self._sim.mutate(lambda now: self._sim.fleet.missing_images.add(image))

    def never_boots(self, machine_id: int) -> None:
        """Rentals on the machine stay in `loading` forever."""
        machine = self._sim.market.machine(machine_id)
        self._sim.mutate(lambda now: self._sim.fleet.set_traits(machine, never_boots=True))

    def change_ip(
        self,
        instance_id: int | None = None,
        *,
        machine_id: int | None = None,
        at: float | None = None,
        new_ip: str | None = None,
    ) -> None:
        """The host's public IP changes (containers see the new one at their next boot). With
        per-instance loopback addresses every instance on the host gets another one of its own
        and `new_ip` moves only the host's address in offers."""
        fleet = self._sim.fleet
        if machine_id is not None:
            machine = self._sim.market.machine(machine_id)
            self._at(at, lambda t: fleet.change_ip(machine, t, new_ip))
        elif instance_id is not None:
            self._on_instance(instance_id, at, lambda i, t: fleet.change_ip(i.machine, t, new_ip))
        else:
            raise ValueError("give instance_id or machine_id")

    def outbid(self, instance_id: int, *, at: float | None = None) -> None:
        """A higher bid takes an interruptible instance's GPUs: it is stopped."""
        self._on_instance(instance_id, at, self._sim.fleet.outbid)

    def take_gpus(self, machine_id: int, count: int | None = None) -> list[int]:
        """Somebody else rents `count` free GPUs of the machine (all when None), so a stopped
        instance that wants them back waits in `scheduling`."""
        taken: list[int] = []

        def take(now: float) -> None:
            taken.extend(self._sim.market.occupy(machine_id, count))

        self._sim.mutate(take)
        return taken

    def free_gpus(self, machine_id: int) -> None:
        """That somebody leaves; waiting instances get their GPUs."""
        machine = self._sim.market.machine(machine_id)
        self._sim.mutate(lambda now: self._sim.fleet.vacate(machine, now))

    def clear(self) -> None:
        """Forget every pending response and listing fault (not instance faults)."""
        with self._lock:
            self._canned.clear()
            self._empty_listings = 0
            self._failing_pages.clear()
            self._slow.clear()

    # -- helpers ----------------------------------------------------------------------------------

    def _instance(self, instance_id: int) -> Instance:
        inst = self._sim.fleet.instances.get(instance_id)
        if inst is None:
            raise KeyError(f"no live instance {instance_id}")
        return inst

    def _on_instance(
        self, instance_id: int, at: float | None, fault: Callable[[Instance, float], None]
    ) -> None:
        self._instance_exists(instance_id)

        def apply(now: float) -> None:
            inst = self._sim.fleet.instances.get(instance_id)
            if inst is not None:
                fault(inst, now)

        self._at(at, apply)

    def _instance_exists(self, instance_id: int) -> None:
        with self._sim.lock:
            self._instance(instance_id)

    def _at(self, at: float | None, apply: Callable[[float], None]) -> None:
        def schedule(now: float) -> None:
            if at is None or at <= now:
                apply(now)
            else:
                self._sim.fleet.schedule(at, apply)

        self._sim.mutate(schedule)
