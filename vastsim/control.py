"""The control API: drive the simulator over HTTP (`/_sim/...`), guarded by the admin key.

Every request needs the header `X-Vastsim-Admin: <admin key>`; without an admin key configured the
control API answers 404, like any unknown path. Control requests are not in the request log.

    POST   /_sim/faults/{name}   body: keyword arguments of `Faults.<name>`
    GET    /_sim/requests        the request log          DELETE /_sim/requests  clears it
    GET    /_sim/counters        requests per route key
    GET    /_sim/meter           {"total", "instances": {id: $}}; ?label_prefix=p adds it
    GET    /_sim/instances       every live instance's row
    POST   /_sim/advance         {"seconds": s}  (virtual clock only)
    POST   /_sim/step            run the life cycles now
    POST   /_sim/signal          {"instance_id": id, "signal": "TERM"}  (a signal from inside)
"""

from __future__ import annotations

import base64
import hmac
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vastsim.instances import instance_row
from vastsim.routing import Handler, Identity, Route, route
from vastsim.wire import BadRequest, Request, Response, error, json_response

if TYPE_CHECKING:
    from vastsim.faults import Faults
    from vastsim.world import World

ADMIN_HEADER = "x-vastsim-admin"


def control_routes(sim: World, faults: Faults) -> list[Route]:
    control = Control(sim, faults)
    return [
        route("POST", "/_sim/faults/{name}", control.guard(control.fault), "admin"),
        route("GET", "/_sim/requests", control.guard(control.requests), "admin"),
        route("DELETE", "/_sim/requests", control.guard(control.clear_requests), "admin"),
        route("GET", "/_sim/counters", control.guard(control.counters), "admin"),
        route("GET", "/_sim/meter", control.guard(control.meter), "admin"),
        route("GET", "/_sim/instances", control.guard(control.instances), "admin"),
        route("POST", "/_sim/advance", control.guard(control.advance), "admin"),
        route("POST", "/_sim/step", control.guard(control.step), "admin"),
        route("POST", "/_sim/signal", control.guard(control.signal), "admin"),
    ]


ControlHandler = Callable[[Request, dict[str, str], float], Response]


class Control:
    def __init__(self, sim: World, faults: Faults) -> None:
        self.sim = sim
        self.faults = faults

    def guard(self, handler: ControlHandler) -> Handler:
        def guarded(req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
            admin = self.sim.admin_key
            if admin is None:
                return error(404, "not_found", f"No route for {req.path}")
            given = req.headers.get(ADMIN_HEADER, "")
            if not hmac.compare_digest(given.encode(), admin.encode()):
                return error(403, "not_authorized", "admin key required")
            try:
                result = handler(req, params, now)
            except BadRequest as exc:
                return error(400, exc.error, exc.msg)
            except (TypeError, ValueError, KeyError) as exc:
                return error(400, "invalid_args", str(exc))
            return result

        return guarded

    def fault(self, req: Request, params: dict[str, str], now: float) -> Response:
        name = params["name"]
        if name not in self.faults.HTTP_METHODS:
            return error(404, "not_found", f"no fault {name!r}")
        result = getattr(self.faults, name)(**req.json_object())
        return json_response({"success": True, "result": result})

    def requests(self, req: Request, params: dict[str, str], now: float) -> Response:
        return json_response(
            [
                {
                    "time": r.time,
                    "method": r.method,
                    "route": r.route,
                    "path": r.path,
                    "status": r.status,
                    "identity": r.identity,
                    "client": r.client,
                    "body": base64.b64encode(r.body).decode(),
                }
                for r in self.sim.requests
            ]
        )

    def clear_requests(self, req: Request, params: dict[str, str], now: float) -> Response:
        self.sim.requests.clear()
        return json_response({"success": True})

    def counters(self, req: Request, params: dict[str, str], now: float) -> Response:
        return json_response(dict(self.sim.counters))

    def meter(self, req: Request, params: dict[str, str], now: float) -> Response:
        meter = self.sim.meter
        body: dict[str, Any] = {
            "total": meter.total(now),
            "instances": {str(i): meter.instance(i, now) for i in meter.instance_ids()},
        }
        prefix = req.query.get("label_prefix")
        if prefix is not None:
            body["label_prefix"] = meter.label_prefix(prefix, now)
        return json_response(body)

    def instances(self, req: Request, params: dict[str, str], now: float) -> Response:
        with self.sim.lock:
            rows = [instance_row(i, now, listing=False) for i in self.sim.fleet.instances.values()]
        return json_response(rows)

    def advance(self, req: Request, params: dict[str, str], now: float) -> Response:
        self.sim.advance(float(req.json_object()["seconds"]))
        return json_response({"success": True, "now": self.sim.clock.now()})

    def step(self, req: Request, params: dict[str, str], now: float) -> Response:
        self.sim.step()
        return json_response({"success": True, "now": self.sim.clock.now()})

    def signal(self, req: Request, params: dict[str, str], now: float) -> Response:
        body = req.json_object()
        sig = body["signal"]
        number = int(sig) if isinstance(sig, int) else int(signal.Signals[_signame(str(sig))])
        delivered = self.sim.signal_from_inside(int(body["instance_id"]), number)
        return json_response({"success": True, "delivered": delivered})


def _signame(name: str) -> str:
    upper = name.upper()
    return upper if upper.startswith("SIG") else f"SIG{upper}"
