"""The launcher's create requests, and the pure decisions without any network."""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import pytest

from reconciler.clock import FakeClock
from reconciler.head import enrollment, heartbeats, tokens
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan
from reconciler.head.launcher import AgentLauncher, LeakRefused
from reconciler.head.messages import EnrollRequest, Heartbeat, RaySample
from reconciler.head.pki import WorkerIdentity
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request, RequestStatus, Slot

from .harness import KEY, LINEAGE, cluster_spec, hc_record

SPEC = cluster_spec()
NOW = 1_800_000_000.0
ENDPOINTS = HeadEndpoints("203.0.113.7", 6390, 18443, 18444)


def launcher(**kw) -> AgentLauncher:
    return AgentLauncher(
        endpoints=ENDPOINTS,
        ca_pem="-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n",
        agent=AgentBundle.load(),
        vast_url="https://console.vast.ai/",
        clock=FakeClock(NOW),
        forbidden=(KEY,),
        **kw,
    )


def candidate(ident: str, request: str = "q1", vast_id: int | None = None, **kw) -> InstanceRecord:
    return hc_record(ident, created_at=NOW - 60, request_id=request, vast_id=vast_id, **kw)


def test_the_create_request_boots_the_bootloader_with_the_head_settings():
    made = launcher(agent_env={"RV_RAY_COMMAND": "python3 fake_ray.py"})
    record = candidate("i1")
    create = made.create_request(SPEC, SPEC.node_types["cpu"], record, bid=0.3)
    bundle = AgentBundle.load()
    assert create.image == SPEC.node_types["cpu"].image and create.label == record.label
    assert create.args[:4] == ("python3", "-I", "-S", "-c")
    assert create.args[4] == bundle.bootloader
    assert create.ports == tuple(range(70000, 70018)) and create.bid_price == 0.3
    env = create.env
    assert env["RV_HEAD_ADDRESS"] == "203.0.113.7" and env["RV_ENROLL_PORT"] == "18443"
    assert env["RV_AGENT_SHA256"] == bundle.sha256
    assert env["RV_VAST_URL"] == "https://console.vast.ai"
    assert env["RV_CA_PEM"].startswith("-----BEGIN CERTIFICATE-----")
    assert env["RV_CLUSTER"] == "hc" and env["RV_RECORD_ID"] == "i1"
    assert env["RV_CANDIDATE_SELF_DESTROY_SECONDS"] == "4"
    assert env["RV_REPORT_WAIT_SECONDS"] == "2"
    assert env["RV_SELF_DESTROY_RETRY_SECONDS"] == "1"
    assert env["RV_BOOTLOADER_GIVE_UP_SECONDS"] == "3"
    assert env["USER_SETTING"] == "hello" and env["RV_RAY_COMMAND"] == "python3 fake_ray.py"
    assert len(env["RV_JOIN_TOKEN"]) >= 43
    assert KEY not in repr(create) and env["RV_JOIN_TOKEN"] not in repr(create)


def test_the_token_reaches_the_records_hashed_before_the_create():
    made = launcher()
    record = candidate("i1")
    create = made.create_request(SPEC, SPEC.node_types["cpu"], record, bid=None)
    records = made.before_create(Records(instances={"i1": record}), record)
    digest = hashlib.sha256(create.env["RV_JOIN_TOKEN"].encode()).hexdigest()
    [token] = records.tokens.values()
    assert token.token_hash == digest and token.record_id == "i1"
    window = SPEC.node_types["cpu"].pull_limit_seconds + 4
    assert (token.issued_at, token.expires_at) == (NOW, NOW + window)
    # a retry on another offer keeps the record id: the new token replaces the old one
    retry = made.create_request(SPEC, SPEC.node_types["cpu"], record, bid=None)
    records = made.before_create(records, record)
    assert list(records.tokens) == [tokens.digest(retry.env["RV_JOIN_TOKEN"])]


def test_a_node_type_without_an_agent_gets_its_image_as_it_is():
    made = launcher()
    record = replace(candidate("i2"), node_type="plain", exempt=True)
    create = made.create_request(SPEC, SPEC.node_types["plain"], record, bid=None)
    assert create.args == () and create.ports == ()
    assert not any(k.startswith("RV_") for k in create.env)
    assert made.before_create(Records(), record) == Records()


def test_a_create_request_that_would_carry_the_account_key_is_refused():
    spec = replace(
        SPEC,
        node_types={
            **SPEC.node_types,
            "cpu": replace(SPEC.node_types["cpu"], env={"LEAKY": f"key={KEY}"}),
        },
    )
    with pytest.raises(LeakRefused):
        launcher().create_request(spec, spec.node_types["cpu"], candidate("i1"), bid=None)


def test_the_port_plan_resolves_what_vast_mapped():
    plan = PortPlan(first=70000, worker_ports=3)
    assert plan.container_ports == (70000, 70001, 70002, 70003, 70004)
    assert plan.resolve({70000: 41000, 70001: 41001, 70003: 41003}) == (
        41000,
        41001,
        (70002, 41003, 70004),
    )
    with pytest.raises(ValueError):
        PortPlan(worker_ports=63)


# --- pure decisions -------------------------------------------------------------------------


def world_of(slots: int, *candidates: InstanceRecord) -> tuple[Records, dict[str, str]]:
    request = Request(
        id="q1",
        cluster="hc",
        node_type="cpu",
        managed_by=LINEAGE,
        placed_at=NOW - 100,
        provision_deadline=NOW + 1000,
        slots=tuple(Slot(f"q1s{i}") for i in range(1, slots + 1)),
    )
    raw: dict[str, str] = {}
    records = Records(instances={c.id: c for c in candidates}, requests={"q1": request})
    for c in candidates:
        raw[c.id] = tokens.mint()
        jt = tokens.join_token(raw[c.id], cluster="hc", record_id=c.id, now=NOW - 50, window=600)
        records = tokens.with_token(records, jt)
    return records, raw


def ask(records: Records, token: str, vast_id: int, boot: str = "abcd0001"):
    request = EnrollRequest(token, vast_id, boot, "198.51.100.9", {}, 4, 1, "test")
    return enrollment.enroll(records, request, cluster="hc", lineage=LINEAGE, now=NOW, serial=12345)


def test_the_last_slot_ends_every_other_candidate_even_one_not_created_yet():
    records, raw = world_of(
        1, candidate("i1", vast_id=11), candidate("i2", vast_id=12), candidate("i3")
    )
    decision = ask(records, raw["i1"], 11)
    assert decision.refusal is None and decision.outcome is not None
    assert decision.outcome.slot_id == "q1s1" and decision.outcome.serial == 12345
    assert decision.records.requests["q1"].status is RequestStatus.FILLED
    assert {(d.record, d.vast_id) for d in decision.destroys} == {("i2", 12), ("i3", None)}
    for ended in ("i2", "i3"):
        rec = decision.records.instances[ended]
        assert (rec.intent, rec.phase) == (Intent.DESTROYED, Phase.DESTROYING)
    worker = decision.records.instances["i1"]
    assert (worker.role, worker.slot_id, worker.public_ip) == (Role.WORKER, "q1s1", "198.51.100.9")


def test_a_record_of_another_state_is_never_acted_on():
    foreign = replace(candidate("i1", vast_id=11), managed_by="99999999-other")
    records, raw = world_of(1, foreign)
    decision = ask(records, raw["i1"], 11)
    assert decision.refusal is not None and decision.refusal.error == "token_check_failed"
    assert decision.destroys == () and decision.records is records


def test_a_heartbeat_moves_the_report_clock_and_busy_follows_the_sample():
    worker = replace(
        candidate("i1", vast_id=11), role=Role.WORKER, phase=Phase.ENROLLED, slot_id="q1s1"
    )
    records = Records(instances={"i1": worker})
    beat = Heartbeat(
        11, "i1", "abcd0001", 1, time.time(), RaySample("running", 1, None, 1.0), 3, None,
        (), 2, 30.0, 0.01, 0.1, 0.2, 3_000_000, 0, None,
    )  # fmt: skip
    identity = WorkerIdentity("hc", "i1", 11, "q1s1", 77)
    decision = heartbeats.heartbeat(records, identity, beat, cluster="hc", lineage=LINEAGE, now=NOW)
    assert decision.refusal is None
    updated = decision.records.instances["i1"]
    assert updated.sample_busy is True  # 100 kB/s of network is traffic
    assert updated.phase is Phase.SERVING and updated.self_report_at == NOW
    quiet = replace(beat, net_rx_bytes=100)
    assert heartbeats.busy(quiet) is False


def test_pruning_keeps_what_a_live_record_may_still_use():
    records, raw = world_of(2, candidate("i1", vast_id=11), candidate("i2", vast_id=12))
    used = ask(records, raw["i1"], 11).records
    later = NOW + 10_000
    pruned = tokens.prune(used, later)
    assert [t.record_id for t in pruned.tokens.values()] == ["i1"]  # used, record live
    ended = replace(used.instances["i1"], phase=Phase.DESTROYED)
    assert tokens.prune(replace(used, instances={"i1": ended}), later).tokens == {}
