"""Wire rows into model dataclasses: strict where meaning lives, tolerant of what vast omits."""

from __future__ import annotations

import dataclasses
import math
import pickle
from typing import Any

import pytest

from reconciler.model import observed
from reconciler.vast import parse

# A loading instance and a running one, shaped like vast-python's real show.json (strings
# with trailing newlines, null actual_status, no ports; then Docker ports, HostPort a string).
LOADING = {
    "id": 1001,
    "label": "rv.c.abcdef12.r1\n",
    "actual_status": None,
    "intended_status": "running",
    "cur_state": "running",
    "next_state": "running",
    "status_msg": "59729b65119e: Pull complete\n",
    "public_ipaddr": "203.0.113.9\n",
    "machine_id": 55,
    "host_id": 9,
    "dph_total": 0.412,
    "dph_base": 0.4,
    "storage_cost": 0.15,
    "disk_space": 40.0,
    "start_date": 1790000000.5,
    "image_uuid": "ghcr.io/x/ray:2.9",
    "num_gpus": 1,
    "gpu_name": "RTX 4090",
    "extra_env": [["-p 22:22", "1"]],
}
RUNNING = {
    **LOADING,
    "actual_status": "running",
    "status_msg": "success, running ghcr.io/x/ray:2.9\n",
    "ports": {
        "22/tcp": [
            {"HostIp": "0.0.0.0", "HostPort": "41022"},
            {"HostIp": "::", "HostPort": "41022"},
        ],
        "6379/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41379"}],
        "8080/tcp": None,
        "9000/udp": [],
    },
    "ssh_host": "ssh4.vast.ai",
    "ssh_port": 12345,
}


def test_instance_strings_are_stripped_and_null_status_allowed() -> None:
    inst = parse.instance(LOADING)
    assert inst.label == "rv.c.abcdef12.r1"
    assert inst.status_msg == "59729b65119e: Pull complete"
    assert inst.public_ipaddr == "203.0.113.9"
    assert inst.actual_status is None
    assert inst.ports == {}
    assert inst.image == "ghcr.io/x/ray:2.9"
    assert inst.dph_total == 0.412


def test_running_instance_ports_map_container_port_to_int_host_port() -> None:
    inst = parse.instance(RUNNING)
    assert inst.ports == {"22/tcp": 41022, "6379/tcp": 41379}
    assert inst.ssh_port == 12345


@pytest.mark.parametrize("ports", [None, {}, {"22/tcp": None}])
def test_absent_or_null_ports_are_empty(ports: Any) -> None:
    assert parse.instance({"id": 1, "ports": ports}).ports == {}


def test_empty_strings_become_none() -> None:
    inst = parse.instance({"id": 1, "label": "", "public_ipaddr": " \n"})
    assert inst.label is None
    assert inst.public_ipaddr is None


def test_instance_row_without_id_is_a_protocol_error() -> None:
    with pytest.raises(parse.ParseError, match="id"):
        parse.instance({k: v for k, v in RUNNING.items() if k != "id"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dph_total", [1]),
        ("dph_total", "cheap"),
        ("dph_total", math.nan),
        ("machine_id", True),
        ("label", 5),
        ("ports", ["22/tcp"]),
        ("ports", {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "x"}]}),
        ("is_bid", "yes"),
    ],
)
def test_wrong_kinds_are_protocol_errors_not_guesses(field: str, value: Any) -> None:
    with pytest.raises(parse.ParseError):
        parse.instance({**RUNNING, field: value})


def test_numeric_strings_and_int_bools_are_accepted() -> None:
    inst = parse.instance({"id": "12", "dph_total": "0.5", "num_gpus": 2.0, "is_bid": 0})
    assert (inst.id, inst.dph_total, inst.num_gpus, inst.is_bid) == (12, 0.5, 2, False)


def test_instance_is_frozen_and_picklable() -> None:
    inst = parse.instance(RUNNING)
    with pytest.raises(dataclasses.FrozenInstanceError):
        inst.label = "x"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(inst)) == inst
    assert dataclasses.asdict(inst)["ports"] == {"22/tcp": 41022, "6379/tcp": 41379}
    assert hash(inst) == hash(parse.instance(RUNNING))


# A real search row (vast-python search.json, trimmed), numbers as vast sends them.
OFFER = {
    "id": 13217766,
    "ask_contract_id": 13217766,
    "machine_id": 13468,
    "host_id": 75880,
    "gpu_name": "RTX 4090",
    "num_gpus": 1,
    "gpu_ram": 24564,
    "cpu_cores": 32,
    "cpu_cores_effective": 8.0,
    "cpu_ram": 128722,
    "disk_space": 482.5,
    "dph_base": 0.35,
    "dph_total": 0.3541666666666667,
    "storage_cost": 0.6,
    "min_bid": 0.2,
    "reliability": 0.9963,
    "reliability2": 0.9963,
    "verification": "verified",
    "geolocation": "Quebec, CA",
    "cuda_max_good": 12.4,
    "direct_port_count": 99,
    "inet_down": 911.3,
    "inet_up": 812.2,
    "rentable": True,
    "rented": False,
    "hosting_type": 0,
    "compute_cap": 890,
    "static_ip": False,
    "external": None,
}


def test_offer_row_parses_every_field_the_planner_reads() -> None:
    offer = parse.offer(OFFER)
    assert offer == observed.Offer(
        id=13217766,
        machine_id=13468,
        host_id=75880,
        dph_total=0.3541666666666667,
        gpu_name="RTX 4090",
        num_gpus=1,
        gpu_ram=24564,
        cpu_cores=32,
        cpu_cores_effective=8.0,
        cpu_ram=128722,
        disk_space=482.5,
        dph_base=0.35,
        storage_cost=0.6,
        min_bid=0.2,
        reliability=0.9963,
        verification="verified",
        geolocation="Quebec, CA",
        cuda_max_good=12.4,
        direct_port_count=99,
        inet_down=911.3,
        inet_up=812.2,
        rentable=True,
        rented=False,
        hosting_type=0,
        compute_cap=890,
        static_ip=False,
    )


def test_offer_with_null_cpu_cores_is_kept_with_none() -> None:
    assert parse.offer({**OFFER, "cpu_cores": None}).cpu_cores is None


@pytest.mark.parametrize("missing", ["id", "machine_id", "host_id", "dph_total"])
def test_offer_without_identity_or_price_is_a_protocol_error(missing: str) -> None:
    with pytest.raises(parse.ParseError, match=missing):
        parse.offer({k: v for k, v in OFFER.items() if k != missing})


@pytest.mark.parametrize(
    "body",
    [{}, {"offers": None}, {"offers": {"id": 1}}, [], "offers", {"offers": [5]}],
)
def test_search_body_without_an_offers_list_is_an_error(body: Any) -> None:
    with pytest.raises(parse.ParseError):
        parse.offers(body)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"success": True, "next_token": None},
        {"instances": None, "next_token": None},
        {"instances": {}, "next_token": None},
        {"instances": [], "next_token": 5},
    ],
)
def test_listing_page_without_instances_is_not_no_instances(body: Any) -> None:
    with pytest.raises(parse.ParseError):
        parse.instance_page(body)


def test_listing_page_empty_token_ends_the_listing() -> None:
    page = parse.instance_page({"instances": [LOADING], "next_token": ""})
    assert page.next_token is None
    assert [i.id for i in page.instances] == [1001]


def test_show_null_is_gone_but_missing_key_is_an_error() -> None:
    assert parse.shown_instance({"instances": None}) is None
    assert parse.shown_instance({"instances": RUNNING}) == parse.instance(RUNNING)
    with pytest.raises(parse.ParseError):
        parse.shown_instance({"success": True})


def test_created_keeps_the_instance_key_out_of_repr() -> None:
    created = parse.created({"success": True, "new_contract": 77, "instance_api_key": "ik-secret"})
    assert created.instance_id == 77
    assert created.instance_api_key == "ik-secret"
    assert "ik-secret" not in repr(created)


@pytest.mark.parametrize(
    "body", [{"success": True}, {"new_contract": None}, {"new_contract": "soon"}, []]
)
def test_created_without_an_instance_id_is_an_error(body: Any) -> None:
    with pytest.raises(parse.ParseError):
        parse.created(body)
