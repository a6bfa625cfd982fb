"""The vast.ai REST API as a WSGI application.

Routes, bodies, status codes and error shapes follow `reference/vast-api.md` (sections 3-8): what
the official `vastai` 1.9.1 CLI sends and what it needs back. Every request goes through the same
gate: injected faults first, then the rate limiter, then authentication, then the handler (under
the simulator's lock), then faults that act after the handler (lost responses).

Keys: the account key (`Authorization: Bearer <key>` or `?api_key=`) may do everything; the
`instance_api_key` returned by a create (the container's `CONTAINER_API_KEY`) may only show, stop
and destroy its own instance. A bad or missing key answers `auth_error` (401, or 404 when
configured, as the real server often does).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vastsim.control import control_routes
from vastsim.instances import index_row, instance_row, parse_env
from vastsim.lifecycle import BidTooLow, CreateRequest
from vastsim.listing import InvalidToken, parse_listing, project, select_page
from vastsim.market import NoSuchAsk
from vastsim.offers import offer_row
from vastsim.query import QueryError, parse_offer_query, search_offers
from vastsim.requestlog import RequestRecord
from vastsim.routing import Identity, Route, Router, route
from vastsim.wire import (
    BadRequest,
    DropConnection,
    Request,
    Response,
    error,
    json_response,
    text_response,
)

if TYPE_CHECKING:
    from vastsim.faults import Faults
    from vastsim.instances import Instance
    from vastsim.world import World

StartResponse = Callable[[str, list[tuple[str, str]]], Any]

V0 = "/api/v0"
NO_SUCH_INSTANCE = "Instance with that ID does not exist."
COMMANDS = ("ls", "rm", "du")


class Api:
    """The WSGI application of one simulator: its world, and the faults that come between."""

    def __init__(self, sim: World, faults: Faults) -> None:
        self.sim = sim
        self.faults = faults
        self.router = Router(self._routes() + control_routes(sim, faults))

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        response = self.handle(Request.from_environ(environ))
        start_response(response.status_line, response.header_list())
        return [response.body]

    def handle(self, req: Request) -> Response:
        """Answer one request (raises `DropConnection` for a lost response)."""
        found, params, path_known = self.router.match(req.method, req.path)
        now = self.sim.clock.now()
        identity = self.identify(req)
        if found is None:
            response = (
                error(405, "method_not_allowed", "Method not allowed")
                if path_known
                else error(404, "not_found", f"No route for {req.path}")
            )
            self._log(req, "", response.status, identity, now)
            return response
        if found.control:
            return found.handler(req, params, identity, now)
        status = 500  # unless it answers, or drops the connection (logged as 0)
        try:
            response = self._gate(found, req, params, identity, now)
            status = response.status
            return response
        except DropConnection:
            status = 0
            raise
        finally:
            self._log(req, found.key, status, identity, now)

    def _gate(
        self, found: Route, req: Request, params: dict[str, str], identity: Identity, now: float
    ) -> Response:
        faults = self.faults
        late_by = faults.lateness(found.key)
        if late_by:
            time.sleep(late_by)  # a slow backend: real time, on this request's own thread
        canned = faults.take(found.key, after=False)
        if canned is not None and canned.response is not None:
            return canned.response
        limited = faults.limiter.check(found.key, f"{req.api_key or ''}@{req.client}", now)
        if limited is not None:
            return limited
        response = self._authorize(found, identity, params) or self._run(
            found, req, params, identity
        )
        late = faults.take(found.key, after=True)
        if late is not None:
            if late.response is None:
                raise DropConnection(found.key)
            return late.response
        return response

    def _run(
        self, found: Route, req: Request, params: dict[str, str], identity: Identity
    ) -> Response:
        try:
            with self.sim.lock:
                response = found.handler(req, params, identity, self.sim.clock.now())
        except (BadRequest, QueryError) as exc:
            response = error(400, exc.error, exc.msg)
        self.sim.flush()
        return response

    def _log(self, req: Request, key: str, status: int, identity: Identity, now: float) -> None:
        record = RequestRecord(
            now, req.method, key, req.path, status, identity.kind, req.body, req.client
        )
        self.sim.requests.append(record)

    # -- auth ---------------------------------------------------------------------------------

    def identify(self, req: Request) -> Identity:
        key = req.api_key
        if key is None:
            return Identity("none")
        if key == self.sim.api_key:
            return Identity("account")
        instance_id = self.sim.instance_keys.get(key)
        if instance_id is not None:
            return Identity("instance", instance_id)
        return Identity("bad")

    def _authorize(
        self, found: Route, identity: Identity, params: dict[str, str]
    ) -> Response | None:
        if found.auth == "public":
            return None
        if identity.kind == "bad" or (identity.kind == "none" and found.auth != "optional"):
            return error(self.faults.auth_error_status, "auth_error", "Invalid user key")
        if identity.kind == "instance":
            own = found.auth == "own" and params.get("id") == str(identity.instance_id)
            if not own:
                return error(403, "not_authorized", "This API key may not do that.")
        return None

    # -- routes -------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        return [
            route("GET", f"{V0}/gpu_names/unique/", self.gpu_names, "public"),
            route("GET", f"{V0}/users/current", self.current_user, "account"),
            route("GET", f"{V0}/users/current/", self.current_user, "account"),
            route("POST", f"{V0}/bundles/", self.search_bundles, "optional"),
            route("GET", f"{V0}/bundles/", self.search_bundles_get, "optional"),
            route("PUT", f"{V0}/search/asks/", self.search_asks, "optional"),
            route("PUT", f"{V0}/asks/{{id}}/", self.create, "account"),
            route("GET", "/api/v1/instances/", self.list_v1, "account"),
            route("GET", f"{V0}/instances/", self.list_v0, "account"),
            route("PUT", f"{V0}/instances/", self.bulk_state, "account"),
            route("DELETE", f"{V0}/instances/", self.bulk_destroy, "account"),
            route("GET", f"{V0}/instances/filters/", self.filters, "account"),
            route("GET", f"{V0}/instances/{{id}}/", self.show, "own"),
            route("PUT", f"{V0}/instances/{{id}}/", self.update, "own"),
            route("DELETE", f"{V0}/instances/{{id}}/", self.destroy, "own"),
            route("PUT", f"{V0}/instances/reboot/{{id}}/", self.reboot, "account"),
            route("PUT", f"{V0}/instances/recycle/{{id}}/", self.recycle, "account"),
            route("PUT", f"{V0}/instances/bid_price/{{id}}/", self.bid_price, "account"),
            route("PUT", f"{V0}/instances/request_logs/{{id}}/", self.request_logs, "account"),
            route("PUT", f"{V0}/instances/command/{{id}}/", self.command, "account"),
            route("POST", f"{V0}/instances/{{id}}/ssh/", self.attach_ssh, "account"),
            route("DELETE", f"{V0}/instances/{{id}}/ssh/{{key_id}}/", self.detach_ssh, "account"),
            route("GET", f"{V0}/ssh/", self.list_ssh, "account"),
            route("POST", f"{V0}/ssh/", self.add_ssh, "account"),
            route("DELETE", f"{V0}/ssh/{{key_id}}/", self.delete_ssh, "account"),
            route("GET", "/static/instance_logs/{token}.log", self.result_file, "public"),
        ]

    # -- market -------------------------------------------------------------------------------

    def gpu_names(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        return json_response({"gpu_names": self.sim.market.gpu_names()})

    def current_user(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        keys = self.sim.ssh_keys
        return json_response(
            {
                "id": 1,
                "username": "vastsim",
                "fullname": "vastsim",
                "email": "vastsim@example.invalid",
                "balance": 0.0,
                "credit": round(self.sim.initial_credit - self.sim.meter.total(now), 6),
                "can_pay": True,
                "has_billing": True,
                "ssh_key": keys[-1]["key"] if keys else "",
                "key_id": 1,
                "sid": "vastsim-session",
                "host_agreement_accepted": False,
                "is_host": False,
                "billaddress_country": "US",
            }
        )

    def search(self, body: dict[str, Any], now: float) -> list[Any]:
        query = parse_offer_query(body)
        rows = [
            offer_row(
                bundle,
                allocated_storage=query.allocated_storage,
                kind=query.kind,
                now=now,
                sim_start=self.sim.started_at,
            )
            for bundle in self.sim.market.bundles()
        ]
        return list(search_offers(rows, query))

    def search_bundles(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        return json_response({"offers": self.search(req.json_object(), now)})

    def search_bundles_get(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.query_json("q", {})
        if not isinstance(body, dict):
            raise BadRequest("invalid_request", "q must be a JSON object")
        return json_response({"offers": self.search(body, now)})

    def search_asks(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.json_object()
        query = body.get("q", {})
        if not isinstance(query, dict):
            raise BadRequest("invalid_request", "q must be a JSON object")
        return json_response({"success": True, "offers": self.search(query, now)})

    # -- create -------------------------------------------------------------------------------

    def create(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        offer_id = int(params["id"])
        body = req.json_object()
        request = create_request(body)
        try:
            bundle = self.sim.market.bundle(offer_id)
        except NoSuchAsk:
            return no_such_ask(offer_id)
        if request.disk > bundle.machine.disk_free():
            return invalid_args(f"disk {request.disk} GB is more than the {offer_id} offer has")
        try:
            inst = self.sim.fleet.create(offer_id, request, now)
        except NoSuchAsk:
            return no_such_ask(offer_id)
        except BidTooLow as low:
            self.sim.instance_keys[low.instance.api_key] = low.instance.id
            floor = low.instance.machine.bid_floor * low.instance.num_gpus
            return error(
                400,
                "invalid_price",
                f"error 400/3471: Your bid is below the current minimum bid of ${floor:.4f}/hr;"
                " the instance was created stopped.",
                new_contract=low.instance.id,
            )
        self.sim.instance_keys[inst.api_key] = inst.id
        return json_response(
            {"success": True, "new_contract": inst.id, "instance_api_key": inst.api_key}
        )

    # -- listing and show ---------------------------------------------------------------------

    def list_v1(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        conditions, order, limit, cols = parse_listing(
            req.query_json("select_filters", {}),
            req.query_json("order_by", [{"col": "id", "dir": "asc"}]),
            req.query.get("limit"),
            req.query_json("select_cols", None),
        )
        after, page_number = None, 1
        token = req.query.get("after_token")
        if token:
            try:
                after, page_number = self.sim.tokens.read(token)
            except InvalidToken:
                return error(400, "invalid_token", "Invalid after_token.")
        injected = self.faults.listing_fault(page_number)
        if injected is not None:
            return injected
        visible = self.sim.fleet.visible(now)
        hidden = [inst for inst in visible if inst.hidden_listings > 0]
        shown = [inst for inst in visible if inst.hidden_listings <= 0]
        by_id = {inst.id: inst for inst in shown}
        columns = {"id", "label"} | {c.field for c in conditions} | {col for col, _ in order}
        index = [index_row(inst, now, columns) for inst in shown]
        page = select_page(index, conditions, order, limit, after)
        if page.last_key is None:
            for inst in hidden:
                inst.hidden_listings -= 1
        next_token = (
            None if page.last_key is None else self.sim.tokens.issue(page.last_key, page_number + 1)
        )
        return json_response(
            {
                "success": True,
                "instances_found": len(page.rows),
                "total_instances": page.total,
                "label_counts": page.label_counts,
                "next_token": next_token,
                "instances": [
                    project(instance_row(by_id[row["id"]], now, listing=True), cols)
                    for row in page.rows
                ],
            }
        )

    def list_v0(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        return error(
            410,
            "deprecated_endpoint",
            "/api/v0/instances/ is deprecated. Use /api/v1/instances/ instead.",
        )

    def filters(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        combos = {
            (i.actual_status, i.machine.verification, i.machine.gpu_name)
            for i in self.sim.fleet.instances.values()
        }
        return json_response(
            {
                "filters": [
                    {"actual_status": s, "verification": v, "gpu_name": g}
                    for s, v, g in sorted(combos, key=str)
                ]
            }
        )

    def show(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        inst = self.sim.fleet.instances.get(int(params["id"]))
        row = None if inst is None else instance_row(inst, now, listing=False)
        return json_response({"instances": row})

    # -- mutations ----------------------------------------------------------------------------

    def update(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        body = req.json_object()
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        if who.kind == "instance" and (set(body) != {"state"} or body["state"] != "stopped"):
            return error(403, "not_authorized", "An instance key may only stop its instance.")
        if "label" not in body and "state" not in body:
            return invalid_args("Give state or label.")
        if "label" in body:
            label = body["label"]
            if label is not None and (not isinstance(label, str) or len(label) > 1024):
                return invalid_args("label must be a string of at most 1024 characters")
            self.sim.fleet.relabel(inst, label)
        if "state" in body:
            return self._set_state(inst, body["state"], now)
        return json_response({"success": True})

    def _set_state(self, inst: Instance, state: Any, now: float) -> Response:
        if state == "stopped":
            self.sim.fleet.stop(inst, now)
        elif state == "running":
            self.sim.fleet.start(inst, now)
        else:
            return invalid_args(f"state must be running or stopped, not {state!r}")
        return json_response({"success": True})

    def bulk_state(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.json_object()
        ids = id_list(body.get("ids", body.get("instance_ids")))
        done, missing = [], []
        for instance_id in ids:
            inst = self.sim.fleet.instances.get(instance_id)
            if inst is None:
                missing.append(instance_id)
                continue
            answer = self._set_state(inst, body.get("state"), now)
            if answer.status != 200:
                return answer
            done.append(instance_id)
        return json_response({"success": True, "updated": done, "not_found": missing})

    def destroy(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        self.sim.fleet.destroy(inst, now)
        return json_response({"success": True})

    def bulk_destroy(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.json_object()
        ids = id_list(body.get("instance_ids", body.get("ids")))
        done, missing = [], []
        for instance_id in ids:
            inst = self.sim.fleet.instances.get(instance_id)
            if inst is None:
                missing.append(instance_id)
            else:
                self.sim.fleet.destroy(inst, now)
                done.append(instance_id)
        return json_response({"success": True, "destroyed": done, "not_found": missing})

    def reboot(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        self.sim.fleet.reboot(inst, now)
        return json_response({"success": True})

    def recycle(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        self.sim.fleet.recycle(inst, now)
        return json_response({"success": True})

    def bid_price(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.json_object()
        price = body.get("price")
        if price is not None:
            try:
                price = float(price)
            except (TypeError, ValueError):
                return invalid_args("Please set a bid price >= 0.001.")
            if price < 0.001:
                return invalid_args("Please set a bid price >= 0.001.")
            if price > 32:
                return invalid_args("Please set a bid price <= 32.")
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        self.sim.fleet.change_bid(inst, price, now)
        return json_response({"success": True})

    # -- logs and commands ----------------------------------------------------------------------

    def request_logs(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        body = req.json_object()
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "invalid_id", "Invalid instance id.")
        lines = self.sim.runner.logs(inst.id).splitlines(keepends=True)
        grep = body.get("filter")
        if grep:
            lines = [line for line in lines if str(grep) in line]
        tail = body.get("tail")
        if tail not in (None, ""):
            try:
                count = int(str(tail))
            except ValueError:
                return invalid_args("tail must be a number")
            lines = lines[-count:] if count > 0 else []
        url = self.sim.publish(req.base_url, "".join(lines))
        return json_response(
            {"success": True, "result_url": url, "msg": "Logs are being uploaded."}
        )

    def command(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        body = req.json_object()
        text = body.get("command")
        if not isinstance(text, str) or not text.strip() or len(text) > 512:
            return invalid_args("command must be 1 to 512 characters")
        try:
            words = shlex.split(text)
        except ValueError:
            return invalid_args("command cannot be parsed")
        if words[0] not in COMMANDS:
            return invalid_args("Only ls, rm and du are allowed.")
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        url = self.sim.publish(req.base_url, "")
        return json_response(
            {
                "success": True,
                "writeable_path": "/workspace",
                "result_url": url,
                "msg": "Command is executing, please wait for the result.",
            }
        )

    def result_file(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        text = self.sim.files.get(params["token"])
        if text is None:
            return text_response(404, "Not Found")
        return text_response(200, text)

    # -- ssh keys -----------------------------------------------------------------------------

    def list_ssh(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        return json_response(list(self.sim.ssh_keys))

    def add_ssh(self, req: Request, params: dict[str, str], who: Identity, now: float) -> Response:
        key = req.json_object().get("ssh_key")
        if not isinstance(key, str) or not key.strip():
            return invalid_args("ssh_key is required")
        record = {
            "id": len(self.sim.ssh_keys) + 1,
            "user_id": 1,
            "key": key.strip(),
            "created_at": now,
            "deleted_at": None,
        }
        self.sim.ssh_keys.append(record)
        shown = {k: v for k, v in record.items() if k != "key"}
        return json_response({"success": True, "key": {**shown, "public_key": record["key"]}})

    def delete_ssh(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        key_id = int(params["key_id"])
        before = len(self.sim.ssh_keys)
        self.sim.ssh_keys[:] = [k for k in self.sim.ssh_keys if k["id"] != key_id]
        if len(self.sim.ssh_keys) == before:
            return error(404, "not_found", "No such ssh key.")
        return json_response({"success": True})

    def attach_ssh(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        key = req.json_object().get("ssh_key")
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        if not isinstance(key, str) or not key.strip():
            return invalid_args("ssh_key is required")
        inst.ssh_keys.append(key.strip())
        return json_response({"success": True, "msg": "SSH key added to instance."})

    def detach_ssh(
        self, req: Request, params: dict[str, str], who: Identity, now: float
    ) -> Response:
        inst = self.sim.fleet.instances.get(int(params["id"]))
        if inst is None:
            return error(404, "no_such_instance", NO_SUCH_INSTANCE)
        return json_response({"success": True, "msg": "SSH key removed from instance."})


# -- helpers ------------------------------------------------------------------------------------


def invalid_args(msg: str) -> Response:
    return error(400, "invalid_args", f"error 400/3467: Invalid args: {msg}")


def no_such_ask(offer_id: int) -> Response:
    return error(
        404,
        "no_such_ask",
        f"error 404/3603: no_such_ask Instance type by id {offer_id} is not available.",
    )


def id_list(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if not isinstance(value, list):
        raise BadRequest("invalid_args", "instance_ids must be a list of ids")
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        raise BadRequest("invalid_args", "instance_ids must be a list of ids") from None


def create_request(body: dict[str, Any]) -> CreateRequest:
    """Read a create body (reference section 5) into what the life cycle needs."""
    image = body.get("image")
    template = body.get("template_hash_id")
    if not image and not template:
        raise BadRequest("invalid_args", "error 400/3467: Invalid args: image is required")
    try:
        raw_disk: Any = body.get("disk")
        disk = float(8.0 if raw_disk is None else raw_disk)
        env = tuple(parse_env(body.get("env")))
    except (TypeError, ValueError) as exc:
        raise BadRequest("invalid_args", f"error 400/3467: Invalid args: {exc}") from None
    if disk <= 0:
        raise BadRequest("invalid_args", "error 400/3467: Invalid args: disk must be positive")
    price = body.get("price")
    if price is not None:
        try:
            price = float(price)
        except (TypeError, ValueError):
            price = -1.0
        if not 0.001 <= price <= 128:
            raise BadRequest("invalid_price", "error 400/3470: Invalid price: 0.001 to 128 $/h.")
    label = body.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > 1024):
        raise BadRequest("invalid_args", "error 400/3467: Invalid args: label")
    args = body.get("args")
    if args is None and isinstance(body.get("args_str"), str):
        args = shlex.split(body["args_str"])
    if args is not None and (
        not isinstance(args, list) or not all(isinstance(a, str) for a in args)
    ):
        raise BadRequest("invalid_args", "error 400/3467: Invalid args: args must be strings")
    runtype = body.get("runtype") or ("args" if args is not None else "ssh")
    onstart = body.get("onstart")
    return CreateRequest(
        image=str(image or f"template/{template}"),
        disk=disk,
        label=label,
        env=env,
        onstart=onstart if isinstance(onstart, str) else None,
        runtype=str(runtype),
        args=None if args is None else tuple(args),
        bid_price=price,
        template_hash_id=template if isinstance(template, str) else None,
    )
