"""Wire formats of the simulated API, checked against the reference (sections 3-8)."""

from __future__ import annotations

import json

import httpx
import pytest

from vastsim import Sim

from .conftest import IMAGE, KEY, T0, listing, offer_on, rent, show


def test_json_content_type_is_exact(client: httpx.Client) -> None:
    for response in (
        client.get("/api/v0/gpu_names/unique/"),
        client.post("/api/v0/bundles/", json={}),
        client.get("/api/v1/instances/"),
        client.get("/api/v0/instances/"),
    ):
        assert response.headers["content-type"] == "application/json"


def test_gpu_names_and_current_user(client: httpx.Client) -> None:
    names = client.get("/api/v0/gpu_names/unique/", headers={"Authorization": ""}).json()
    assert names == {"gpu_names": ["A100 SXM4", "RTX 3060", "RTX 3090", "RTX 4090"]}
    user = client.get("/api/v0/users/current").json()
    assert user["host_agreement_accepted"] is False
    assert {"id", "email", "balance", "credit", "ssh_key", "key_id", "sid"} <= set(user)


def test_create_answers_new_contract_and_instance_key(client: httpx.Client, sim: Sim) -> None:
    answer = rent(client, label="rv.c.1", env={"A": "1", "-p 8080:8080": "1"})
    assert answer["success"] is True
    assert isinstance(answer["new_contract"], int)
    assert answer["new_contract"] in sim.instances
    assert len(answer["instance_api_key"]) == 64


def test_taken_offer_is_no_such_ask(client: httpx.Client) -> None:
    offer = offer_on(client, 2)
    body = {"client_id": "me", "image": IMAGE, "disk": 10}
    assert client.put(f"/api/v0/asks/{offer}/", json=body).status_code == 200
    again = client.put(f"/api/v0/asks/{offer}/", json=body)
    assert again.status_code == 404
    assert again.json()["error"] == "no_such_ask"
    assert again.json()["success"] is False
    assert client.put("/api/v0/asks/999/", json=body).json()["error"] == "no_such_ask"


def test_renting_consumes_offers_and_destroy_frees_them(client: httpx.Client) -> None:
    def bundles_on_4() -> list[int]:
        found = client.post("/api/v0/bundles/", json={"machine_id": {"eq": 4}}).json()["offers"]
        return sorted(o["num_gpus"] for o in found)

    assert bundles_on_4() == [1, 2, 4]
    first = rent(client, 4)["new_contract"]
    assert bundles_on_4() == [1, 2]  # three GPUs left
    rent(client, 4)
    assert bundles_on_4() == [1, 2]
    assert client.delete(f"/api/v0/instances/{first}/").status_code == 200
    assert bundles_on_4() == [1, 2]  # GPUs 0 and 2, 3 free again: three again
    offers = client.post("/api/v0/bundles/", json={"machine_id": {"eq": 4}}).json()["offers"]
    assert sorted(tuple(o["gpu_ids"]) for o in offers) == [(0,), (0, 2)]


def test_create_validates_its_body(client: httpx.Client) -> None:
    offer = offer_on(client, 1)
    no_image = client.put(f"/api/v0/asks/{offer}/", json={"disk": 10})
    assert no_image.status_code == 400
    assert no_image.json()["error"] == "invalid_args"
    bad_price = client.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "price": 500})
    assert bad_price.json()["error"] == "invalid_price"
    huge_disk = client.put(f"/api/v0/asks/{offer}/", json={"image": IMAGE, "disk": 10**6})
    assert huge_disk.json()["error"] == "invalid_args"


def test_show_row_shape_while_loading_and_running(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(
        client, env={"TZ": "UTC", "-p 8080:8080": "1"}, runtype="ssh_direc ssh_proxy"
    )["new_contract"]
    row = show(client, instance_id)
    assert row is not None
    assert row["actual_status"] is None
    assert isinstance(row["start_date"], float)
    assert row["start_date"] == T0
    assert row["extra_env"] == [["TZ", "UTC"], ["-p 8080:8080", "1"]]
    assert "ports" not in row
    assert row["ssh_port"] is None
    sim.advance(20)
    row = show(client, instance_id)
    assert row is not None
    assert row["actual_status"] == "running"
    assert row["intended_status"] == row["cur_state"] == row["next_state"] == "running"
    assert set(row["ports"]) == {"22/tcp", "8080/tcp"}
    mapping = row["ports"]["8080/tcp"][0]
    assert isinstance(mapping["HostPort"], str)
    assert mapping["HostIp"] == "0.0.0.0"
    assert isinstance(row["ssh_port"], int)
    assert row["status_msg"].endswith("\n")
    assert row["local_ipaddrs"].endswith("\n")
    assert not row["public_ipaddr"].endswith("\n")
    assert row["dph_total"] == pytest.approx(0.40 + 10 * 0.2 / 720)


def test_listing_strings_carry_trailing_newlines(client: httpx.Client, sim: Sim) -> None:
    rent(client)
    sim.advance(20)
    (row,) = listing(client)
    assert row["public_ipaddr"].endswith("\n")
    assert row["local_ipaddrs"].endswith("\n")
    assert row["status_msg"].endswith("\n")
    assert isinstance(row["start_date"], float)
    assert isinstance(row["extra_env"], list)


def test_v0_listing_is_gone(client: httpx.Client) -> None:
    response = client.get("/api/v0/instances/", params={"owner": "me"})
    assert response.status_code == 410
    assert response.json() == {
        "success": False,
        "error": "deprecated_endpoint",
        "msg": "/api/v0/instances/ is deprecated. Use /api/v1/instances/ instead.",
    }


def test_show_of_gone_instance_is_null_and_destroy_again_is_404(client: httpx.Client) -> None:
    instance_id = rent(client)["new_contract"]
    assert client.request("DELETE", f"/api/v0/instances/{instance_id}/", json={}).json() == {
        "success": True
    }
    assert show(client, instance_id) is None
    again = client.request("DELETE", f"/api/v0/instances/{instance_id}/", json={})
    assert again.status_code == 404
    assert again.json()["error"] == "no_such_instance"
    assert show(client, 123) is None


def test_pagination_pages_and_tokens(client: httpx.Client, sim: Sim) -> None:
    ids = [create_anywhere(client, sim, label=f"L{i % 3}") for i in range(30)]
    first = client.get("/api/v1/instances/", params={"limit": 100}).json()
    assert first["success"] is True
    assert first["instances_found"] == 25
    assert first["total_instances"] == 30
    assert first["label_counts"] == {"L0": 10, "L1": 10, "L2": 10}
    token = first["next_token"]
    assert isinstance(token, str)
    assert str(ids[24]) not in token  # opaque
    second = client.get("/api/v1/instances/", params={"after_token": token}).json()
    assert second["instances_found"] == 5
    assert second["next_token"] is None
    got = [r["id"] for r in first["instances"]] + [r["id"] for r in second["instances"]]
    assert got == sorted(ids)
    small = client.get("/api/v1/instances/", params={"limit": 0}).json()
    assert small["instances_found"] == 5
    bad = client.get("/api/v1/instances/", params={"after_token": "not-a-token"})
    assert bad.status_code == 400
    assert bad.json()["error"] == "invalid_token"
    forged = client.get("/api/v1/instances/", params={"after_token": token[:-1] + "x"})
    assert forged.status_code == 400


def test_listing_order_filters_and_select_cols(client: httpx.Client, sim: Sim) -> None:
    ids = [create_anywhere(client, sim, label=f"L{i % 2}") for i in range(6)]
    desc = listing(client, order_by=json.dumps([{"col": "id", "dir": "desc"}]))
    assert [r["id"] for r in desc] == sorted(ids, reverse=True)
    only = listing(client, select_filters=json.dumps({"label": {"in": ["L1"]}}))
    assert {r["id"] for r in only} == set(ids[1::2])
    cols = listing(client, select_cols=json.dumps(["id", "label", "no_such_col"]))
    assert set(cols[0]) == {"id", "label", "no_such_col"}
    assert cols[0]["no_such_col"] is None
    computed = client.get(
        "/api/v1/instances/", params={"select_filters": json.dumps({"dph_total": {"lt": 1}})}
    )
    assert computed.status_code == 400
    assert computed.json()["error"] == "invalid_request"
    assert "dph_total is not a valid search key" in computed.json()["msg"]


def test_unlabeled_instances_count_under_empty_label(client: httpx.Client, sim: Sim) -> None:
    rent(client)
    data = client.get("/api/v1/instances/").json()
    assert data["label_counts"] == {"": 1}
    unlabeled = listing(client, select_filters=json.dumps({"label": {"in": [None]}}))
    assert len(unlabeled) == 1


def test_label_stop_start_via_put(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client)["new_contract"]
    sim.advance(20)
    url = f"/api/v0/instances/{instance_id}/"
    assert client.put(url, json={"label": "x"}).json() == {"success": True}
    assert sim.instances[instance_id].label == "x"
    assert client.put(url, json={"state": "stopped"}).json() == {"success": True}
    row = show(client, instance_id)
    assert row is not None
    assert (row["actual_status"], row["intended_status"]) == ("stopped", "stopped")
    assert client.put(url, json={"state": "running"}).json() == {"success": True}
    sim.advance(10)
    row = show(client, instance_id)
    assert row is not None
    assert row["actual_status"] == "running"
    assert client.put(url, json={"state": "frozen"}).status_code == 400
    assert client.put(url, json={}).status_code == 400
    assert client.put("/api/v0/instances/42/", json={"label": "x"}).status_code == 404


def test_verbs_under_instances(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client, price=0.3)["new_contract"]
    sim.advance(20)
    for verb in ("reboot", "recycle"):
        response = client.put(f"/api/v0/instances/{verb}/{instance_id}/", json={})
        assert response.json() == {"success": True}
        assert client.put(f"/api/v0/instances/{verb}/7/", json={}).status_code == 404
    bid = client.put(
        f"/api/v0/instances/bid_price/{instance_id}/", json={"client_id": "me", "price": 0.35}
    )
    assert bid.json() == {"success": True}
    assert sim.instances[instance_id].bid_price == 0.35
    low = client.put(f"/api/v0/instances/bid_price/{instance_id}/", json={"price": 0.0})
    assert low.status_code == 400
    assert low.json()["msg"] == "error 400/3467: Invalid args: Please set a bid price >= 0.001."
    command = client.put(f"/api/v0/instances/command/{instance_id}/", json={"command": "ls -l"})
    assert command.json()["writeable_path"] == "/workspace"
    assert command.json()["result_url"].startswith("http://vastsim.test/")
    refused = client.put(f"/api/v0/instances/command/{instance_id}/", json={"command": "cat x"})
    assert refused.status_code == 400


def test_request_logs_serves_a_result_url(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client)["new_contract"]
    sim.advance(20)
    container = sim.runner.running(instance_id)  # type: ignore[attr-defined]
    for n in range(5):
        container.log(f"line {n}")
    answer = client.put(f"/api/v0/instances/request_logs/{instance_id}/", json={"tail": "2"})
    assert answer.json()["success"] is True
    url = answer.json()["result_url"]
    text = client.get(url, headers={"Authorization": ""})
    assert text.status_code == 200
    assert text.text == "line 3\nline 4\n"
    missing = client.put("/api/v0/instances/request_logs/5/", json={})
    assert missing.status_code == 404
    assert missing.json()["error"] == "invalid_id"


def test_ssh_keys(client: httpx.Client) -> None:
    assert client.get("/api/v0/ssh/").json() == []
    added = client.post("/api/v0/ssh/", json={"ssh_key": "ssh-ed25519 AAAA test"}).json()
    assert added["success"] is True
    assert added["key"]["public_key"] == "ssh-ed25519 AAAA test"
    keys = client.get("/api/v0/ssh/").json()
    assert [k["key"] for k in keys] == ["ssh-ed25519 AAAA test"]
    instance_id = rent(client)["new_contract"]
    attach = client.post(
        f"/api/v0/instances/{instance_id}/ssh/", json={"ssh_key": "ssh-ed25519 BBBB"}
    )
    assert attach.json()["success"] is True
    assert client.delete(f"/api/v0/ssh/{keys[0]['id']}/").json() == {"success": True}


def test_bulk_destroy(client: httpx.Client, sim: Sim) -> None:
    a = rent(client, 1)["new_contract"]
    b = rent(client, 2)["new_contract"]
    response = client.request("DELETE", "/api/v0/instances/", json={"instance_ids": [a, b, 9]})
    assert response.json() == {"success": True, "destroyed": [a, b], "not_found": [9]}
    assert sim.instances == {}


def test_bad_key_is_auth_error_401_or_404(client: httpx.Client, sim: Sim) -> None:
    bad = client.get("/api/v1/instances/", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    assert bad.json() == {"success": False, "error": "auth_error", "msg": "Invalid user key"}
    missing = client.get("/api/v1/instances/", headers={"Authorization": ""})
    assert missing.status_code == 401
    sim.faults.auth_status(404)
    assert (
        client.get("/api/v1/instances/", headers={"Authorization": "Bearer x"}).status_code == 404
    )


def test_api_key_query_parameter(client: httpx.Client) -> None:
    response = client.get(
        "/api/v1/instances/", params={"api_key": KEY}, headers={"Authorization": ""}
    )
    assert response.status_code == 200


def test_instance_key_may_show_stop_and_destroy_only_its_own(
    client: httpx.Client, sim: Sim
) -> None:
    mine = rent(client, 1)
    other = rent(client, 2)["new_contract"]
    sim.advance(20)
    scoped = {"Authorization": f"Bearer {mine['instance_api_key']}"}
    own = f"/api/v0/instances/{mine['new_contract']}/"
    assert client.get(own, headers=scoped).json()["instances"]["id"] == mine["new_contract"]
    assert client.get(f"/api/v0/instances/{other}/", headers=scoped).status_code == 403
    assert client.get("/api/v1/instances/", headers=scoped).status_code == 403
    assert client.put(own, json={"label": "x"}, headers=scoped).status_code == 403
    assert client.put(own, json={"state": "running"}, headers=scoped).status_code == 403
    assert client.delete(f"/api/v0/instances/{other}/", headers=scoped).status_code == 403
    assert client.put(own, json={"state": "stopped"}, headers=scoped).json()["success"] is True
    assert client.delete(own, headers=scoped).json() == {"success": True}
    assert client.get(own, headers=scoped).json() == {"instances": None}


def test_unknown_route_and_method(client: httpx.Client) -> None:
    assert client.get("/api/v0/nothing/").status_code == 404
    assert client.post("/api/v0/gpu_names/unique/").status_code == 405


def test_request_log_and_counters(client: httpx.Client, sim: Sim) -> None:
    instance_id = rent(client)["new_contract"]
    show(client, instance_id)
    show(client, instance_id)
    assert sim.counters["GET /api/v0/instances/{id}/"] == 2
    assert sim.counters["PUT /api/v0/asks/{id}/"] == 1
    record = sim.requests.filter(route="PUT /api/v0/asks/{id}/")[0]
    assert (record.method, record.status, record.time, record.identity) == (
        "PUT",
        200,
        T0,
        "account",
    )
    assert json.loads(record.body)["image"] == IMAGE


def create_anywhere(client: httpx.Client, sim: Sim, **body: object) -> int:
    """Rent the first 1-GPU offer, adding GPUs to machine 5 when the market runs dry."""
    offers = client.post("/api/v0/bundles/", json={"num_gpus": {"eq": 1}}).json()["offers"]
    if not offers:
        machine = sim.market.machines[5]
        machine.num_gpus += 1
        machine.gpu_owner.append(None)
        sim.market.refresh(machine)
        offers = client.post("/api/v0/bundles/", json={"num_gpus": {"eq": 1}}).json()["offers"]
    payload = {"image": IMAGE, "disk": 1.0, **body}
    response = client.put(f"/api/v0/asks/{offers[0]['id']}/", json=payload)
    assert response.status_code == 200, response.text
    return int(response.json()["new_contract"])
