"""Every injectable fault, shown happening through the API."""

from __future__ import annotations

import json

import httpx
import pytest

from vastsim import InProcessTransport, ScriptedRunner, Sim, VirtualClock, serve

from .conftest import ADMIN, IMAGE, KEY, T0, TIMING, listing, offer_on, rent, show, small_market

CREATE = "PUT /api/v0/asks/{id}/"
LIST = "GET /api/v1/instances/"
SHOW = "GET /api/v0/instances/{id}/"


def status(client: httpx.Client, instance_id: int) -> str | None:
    row = show(client, instance_id)
    assert row is not None
    value: str | None = row["actual_status"]
    return value


# -- 429 storms ----------


def test_429_plain_text(client: httpx.Client, sim: Sim) -> None:
    sim.faults.rate_limit(LIST, count=2)
    for _ in range(2):
        response = client.get("/api/v1/instances/")
        assert response.status_code == 429
        assert response.headers["content-type"] == "text/plain"
        assert response.text == "API requests too frequent: endpoint threshold=1.0"
        assert "retry-after" not in response.headers
    assert client.get("/api/v1/instances/").status_code == 200


def test_429_detail_json_with_retry_after(client: httpx.Client, sim: Sim) -> None:
    sim.faults.rate_limit(SHOW, style="detail", retry_after=2, threshold=2.0)
    response = client.get("/api/v0/instances/1/")
    assert response.status_code == 429
    assert response.json() == {"detail": "API requests too frequent endpoint threshold=2.0"}
    assert response.headers["retry-after"] == "2"
    assert client.get("/api/v0/instances/1/").status_code == 200


def test_429_rate_limit_exceeded_json(client: httpx.Client, sim: Sim) -> None:
    sim.faults.rate_limit("*", style="json")
    response = client.post("/api/v0/bundles/", json={})
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limit_exceeded"
    assert response.json()["success"] is False


def test_429_search_quota(client: httpx.Client, sim: Sim) -> None:
    sim.faults.rate_limit("POST /api/v0/bundles/", style="quota")
    response = client.post("/api/v0/bundles/", json={})
    assert response.status_code == 429
    assert response.json()["error"] == "search_quota_exceeded"
    assert int(response.headers["x-ratelimit-reset"]) == int(T0 + 86_400)


def test_minimum_intervals_like_vast(client: httpx.Client, sim: Sim) -> None:
    sim.faults.enable_rate_limits()
    answer = rent(client, 1)
    instance_id = answer["new_contract"]
    assert client.get(f"/api/v0/instances/{instance_id}/").status_code == 200
    limited = client.get(f"/api/v0/instances/{instance_id}/")
    assert limited.status_code == 429
    assert limited.json() == {"detail": "API requests too frequent endpoint threshold=2.0"}
    sim.advance(1.9)
    assert client.get(f"/api/v0/instances/{instance_id}/").status_code == 429
    sim.advance(0.1)
    assert client.get(f"/api/v0/instances/{instance_id}/").status_code == 200
    # per identity: another key has its own window
    scoped = {"Authorization": f"Bearer {answer['instance_api_key']}"}
    other = client.get(f"/api/v0/instances/{instance_id}/", headers=scoped)
    assert other.status_code == 200
    # per endpoint: the listing is not limited by the show
    assert client.get("/api/v1/instances/").status_code == 200
    sim.faults.disable_rate_limits()
    assert client.get(f"/api/v0/instances/{instance_id}/").status_code == 200


# -- 5xx ----------


@pytest.mark.parametrize("code", [500, 502, 503, 504])
def test_5xx_with_html_bodies(client: httpx.Client, sim: Sim, code: int) -> None:
    sim.faults.server_error(LIST, status=code)
    response = client.get("/api/v1/instances/")
    assert response.status_code == code
    assert response.headers["content-type"] == "text/html"
    assert response.text.startswith("<html>")
    assert client.get("/api/v1/instances/").status_code == 200


def test_5xx_after_the_work_was_done(client: httpx.Client, sim: Sim) -> None:
    sim.faults.server_error(CREATE, status=504, after=True)
    offer = offer_on(client, 1)
    response = client.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "label": "ghost"})
    assert response.status_code == 504
    assert [i.label for i in sim.instances.values()] == ["ghost"]


# -- lost create responses ----------


def test_lost_create_in_process_raises_and_the_instance_exists(
    client: httpx.Client, sim: Sim
) -> None:
    sim.faults.lose_create_response()
    offer = offer_on(client, 1)
    with pytest.raises(httpx.RemoteProtocolError):
        client.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "label": "rv.lost.1"})
    (row,) = listing(client)
    assert row["label"] == "rv.lost.1"
    sim.advance(3600)
    assert sim.meter.label_prefix("rv.lost.") > 0
    record = sim.requests.filter(route=CREATE)[-1]
    assert record.status == 0
    # the next create answers normally
    assert rent(client, 2)["success"] is True


def test_lost_create_on_a_real_socket_closes_the_connection() -> None:
    sim = Sim(market=small_market(), clock=VirtualClock(T0), api_key=KEY, timing=TIMING)
    with (
        serve(sim) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        sim.faults.lose_create_response()
        offer = offer_on(http, 1)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            http.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "label": "lost"})
        assert [i.label for i in sim.instances.values()] == ["lost"]
        assert http.get("/api/v0/gpu_names/unique/").status_code == 200
    assert sim.instances == {}


# -- listings ----------


def test_instance_missing_from_the_next_k_listings(client: httpx.Client, sim: Sim) -> None:
    a = rent(client, 1)["new_contract"]
    b = rent(client, 2)["new_contract"]
    sim.faults.hide_instance(a, listings=2)
    assert [r["id"] for r in listing(client)] == [b]
    assert [r["id"] for r in listing(client)] == [b]
    assert [r["id"] for r in listing(client)] == [a, b]
    assert show(client, a) is not None  # show still sees it


def test_new_instances_missing_from_their_first_listing(client: httpx.Client, sim: Sim) -> None:
    sim.faults.hide_new_instances(1)
    a = rent(client, 1)["new_contract"]
    assert listing(client) == []
    assert [r["id"] for r in listing(client)] == [a]


def test_one_page_of_a_listing_fails(client: httpx.Client, sim: Sim) -> None:
    machine = sim.market.machines[5]
    machine.num_gpus = 30
    machine.gpu_owner = [None] * 30
    sim.market.refresh(machine)
    for _ in range(30):
        offers = client.post(
            "/api/v0/bundles/", json={"machine_id": {"eq": 5}, "num_gpus": {"eq": 1}}
        ).json()["offers"]
        client.put(f"/api/v0/asks/{offers[0]['id']}/", json={"image": IMAGE, "disk": 1})
    sim.faults.fail_listing(page=2, status=502)
    first = client.get("/api/v1/instances/")
    assert first.status_code == 200
    second = client.get("/api/v1/instances/", params={"after_token": first.json()["next_token"]})
    assert second.status_code == 502
    assert second.headers["content-type"] == "text/html"
    assert len(listing(client)) == 30


def test_listing_comes_back_empty(client: httpx.Client, sim: Sim) -> None:
    rent(client, 1)
    sim.faults.empty_listing()
    data = client.get("/api/v1/instances/").json()
    assert data == {
        "success": True,
        "instances_found": 0,
        "total_instances": 0,
        "label_counts": {},
        "next_token": None,
        "instances": [],
    }
    assert len(listing(client)) == 1


# -- instances and hosts ----------


def test_exited_at_a_time(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.faults.exit_instance(instance_id, at=T0 + 100, code=137)
    sim.advance(99)
    assert status(client, instance_id) == "running"
    sim.advance(1)
    row = show(client, instance_id)
    assert row is not None
    assert (row["actual_status"], row["intended_status"]) == ("exited", "running")
    assert row["status_msg"] == "Exited (137)\n"
    assert sim.runner.running(instance_id) is None  # type: ignore[attr-defined]


def test_offline_at_a_time_for_the_whole_host(client: httpx.Client, sim: Sim) -> None:
    a = rent(client, 4)["new_contract"]
    b = rent(client, 4)["new_contract"]
    sim.faults.offline(machine_id=4, at=T0 + 50)
    sim.advance(50)
    assert (status(client, a), status(client, b)) == ("offline", "offline")
    assert client.post("/api/v0/bundles/", json={"machine_id": {"eq": 4}}).json()["offers"] == []


def test_unknown_keeps_the_container(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    sim.faults.unknown(instance_id)
    assert status(client, instance_id) == "unknown"
    assert sim.runner.running(instance_id) is not None  # type: ignore[attr-defined]


def test_a_host_heard_again_is_running_on_the_same_boot(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    sim.faults.unknown(instance_id)
    sim.faults.heard_again(instance_id, at=sim.clock.now() + 60)
    sim.advance(30)
    assert status(client, instance_id) == "unknown"
    sim.advance(30)
    assert status(client, instance_id) == "running"
    assert sim.fleet.instances[instance_id].boots == 1  # the container never stopped


def test_oci_create_failure(client: httpx.Client, sim: Sim) -> None:
    sim.faults.oci_failure(2)
    instance_id = rent(client, 2)["new_contract"]
    sim.advance(3600)
    row = show(client, instance_id)
    assert row is not None
    assert row["actual_status"] == "created"
    assert "OCI runtime create failed" in row["status_msg"]
    assert sim.meter.rate(instance_id) == pytest.approx(10 * 0.2 / 720)  # storage only


def test_oci_failure_for_one_instance(client: httpx.Client, sim: Sim) -> None:
    first = rent(client, 1)["new_contract"]
    sim.faults.oci_failure(instance_id=first)
    sim.advance(60)
    assert status(client, first) == "created"


def test_host_that_never_boots(client: httpx.Client, sim: Sim) -> None:
    sim.faults.never_boots(1)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(86_400)
    assert status(client, instance_id) == "loading"


def test_public_ip_change(client: httpx.Client, sim: Sim) -> None:
    runner = sim.runner
    assert isinstance(runner, ScriptedRunner)
    instance_id = rent(client, 1)["new_contract"]
    sim.advance(20)
    row = show(client, instance_id)
    assert row is not None
    before = row["public_ipaddr"]
    sim.faults.change_ip(instance_id, at=T0 + 100, new_ip="198.51.100.7")
    sim.advance(80)
    row = show(client, instance_id)
    assert row is not None
    assert row["public_ipaddr"] == "198.51.100.7" != before
    container = runner.running(instance_id)
    assert container is not None
    assert container.env["PUBLIC_IPADDR"] == before  # until the container boots again
    client.put(f"/api/v0/instances/reboot/{instance_id}/", json={})
    sim.advance(8)
    container = runner.running(instance_id)
    assert container is not None
    assert container.env["PUBLIC_IPADDR"] == "198.51.100.7"


def test_spot_outbid_and_resume_by_raising_the_bid(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, 1, price=0.25)["new_contract"]
    sim.advance(20)
    assert show(client, instance_id)["is_bid"] is True  # type: ignore[index]
    sim.faults.outbid(instance_id)
    row = show(client, instance_id)
    assert row is not None
    assert (row["actual_status"], row["intended_status"], row["cur_state"], row["next_state"]) == (
        "stopped",
        "stopped",
        "stopped",
        "stopped",
    )
    assert row["min_bid"] > 0.25
    client.put(f"/api/v0/instances/bid_price/{instance_id}/", json={"price": 0.5})
    sim.advance(10)
    assert status(client, instance_id) == "running"


def test_bid_under_the_floor_creates_a_stopped_instance(client: httpx.Client, sim: Sim) -> None:
    offer = offer_on(client, 1)
    response = client.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "price": 0.1})
    assert response.status_code == 400
    orphan = response.json()["new_contract"]
    assert response.json()["error"] == "invalid_price"
    assert status(client, orphan) == "stopped"


def test_faults_over_http_need_the_admin_key(client: httpx.Client, sim: Sim) -> None:
    url = "/_sim/faults/rate_limit"
    body = {"route": LIST, "count": 1, "style": "detail"}
    assert client.post(url, json=body).status_code == 403
    assert client.post(url, json=body, headers={"X-Vastsim-Admin": "wrong"}).status_code == 403
    assert client.post(url, json=body, headers={"X-Vastsim-Admin": ADMIN}).json() == {
        "success": True,
        "result": None,
    }
    assert client.get("/api/v1/instances/").status_code == 429
    unknown = client.post("/_sim/faults/shutdown", json={}, headers={"X-Vastsim-Admin": ADMIN})
    assert unknown.status_code == 404
    counters = client.get("/_sim/counters", headers={"X-Vastsim-Admin": ADMIN}).json()
    assert counters == {LIST: 1}
    log = client.get("/_sim/requests", headers={"X-Vastsim-Admin": ADMIN}).json()
    assert [(r["route"], r["status"]) for r in log] == [(LIST, 429)]


def test_control_api_is_off_without_an_admin_key() -> None:
    with Sim(market=small_market(), clock=VirtualClock(T0), api_key=KEY) as sim:
        transport = InProcessTransport(sim)
        with httpx.Client(transport=transport, base_url="http://v") as http:
            response = http.get("/_sim/counters", headers={"X-Vastsim-Admin": ""})
            assert response.status_code == 404
            assert json.loads(response.text)["error"] == "not_found"
