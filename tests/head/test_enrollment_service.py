"""The head's enrollment port over real TLS sockets, against a served vastsim.

Enrollment order and slot filling, extras destroyed the moment the last slot fills, and every
refusal (late candidate, second enrollment, reused, expired and foreign tokens) answered with 403
and kept in the ledger.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.head import messages
from reconciler.head.agentsource import AgentBundle
from reconciler.head.decisions import put
from reconciler.model.codec import encode
from reconciler.model.records import BreakerState, Intent, Phase, Role
from reconciler.model.requestrecord import RequestStatus
from tests.waiting import wait_for

from .harness import KEY, HeadWorld, client_pair, head_world
from .schemas import assert_valid


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        yield w


def gone(world: HeadWorld, vast_id: int) -> bool:
    return vast_id not in world.sim.instances


def test_first_candidates_fill_the_slots_and_extras_are_destroyed_at_once(world: HeadWorld):
    request = world.place(slots=2)
    world.change(lambda r: replace(r, breakers={"hc/cpu": BreakerState(consecutive_empty=2)}))
    c1, c2, c3, c4 = (world.rent(request) for _ in range(4))

    first = world.enroll(c3)
    assert first.status == 200, first.doc
    assert_valid(messages.ENROLL_RESPONSE, first.doc)
    assert first.doc["slot_id"] == f"{request}s1"
    assert first.doc["record_id"] == c3.record_id
    assert world.records().requests[request].status is RequestStatus.OPEN
    assert not gone(world, c1.vast_id) and not gone(world, c2.vast_id)
    # a successful enrollment resets the rent-loop breaker's count
    assert world.records().breakers["hc/cpu"].consecutive_empty == 0

    second = world.enroll(c1)
    assert second.status == 200, second.doc
    assert second.doc["slot_id"] == f"{request}s2"

    # the last slot filled: the other candidates are destroyed now, not on a later tick
    wait_for(lambda: gone(world, c2.vast_id) and gone(world, c4.vast_id), timeout=5)
    assert not gone(world, c1.vast_id) and not gone(world, c3.vast_id)
    records = world.records()
    assert records.requests[request].status is RequestStatus.FILLED
    assert [s.worker for s in records.requests[request].slots] == [c3.record_id, c1.record_id]
    for worker in (c3, c1):
        rec = records.instances[worker.record_id]
        assert (rec.role, rec.phase, rec.vast_id) == (Role.WORKER, Phase.ENROLLED, worker.vast_id)
        assert rec.public_ip == "127.0.0.1" and rec.enrolled_at is not None
    # the destroyer marks a record destroyed and ledgers the outcome together, after vast's answer
    wait_for(lambda: all(world.record(x.record_id).phase is Phase.DESTROYED for x in (c2, c4)), 5)
    for extra in (c2, c4):
        rec = world.record(extra.record_id)
        assert rec.intent is Intent.DESTROYED and rec.ended_reason == "extra_candidate"

    extras = world.ledger("extra_candidate")
    kinds = [(e.kind.value, e.record) for e in extras]
    for extra in (c2, c4):
        # intent first, then the call, then the outcome
        assert [k for k, r in kinds if r == extra.record_id] == ["decision", "call", "outcome"]
    assert {e.record for e in world.ledger("enrolled")} == {c3.record_id, c1.record_id}

    # the answer ties the Ray node to its slot
    ray = first.doc["ray"]
    assert ray["resources"] == {"special": 2.0, f"rv-slot-{request}s1": 1.0}
    assert ray["labels"] == {
        "team": "ml",
        "rv_cluster": "hc",
        "rv_node_type": "cpu",
        "rv_record": c3.record_id,
        "rv_slot": f"{request}s1",
    }
    assert ray["env"]["RAY_CLOUD_INSTANCE_ID"] == str(c3.vast_id)
    # its raylet looks for its object store every 100 ms, as the head's does (model/raystart.py)
    assert ray["env"]["RAY_raylet_client_connect_timeout_milliseconds"] == "100"
    assert ray["env"]["RAY_raylet_client_num_connect_attempts"] == "100"
    assert ray["auth_mode"] == "token" and ray["auth_token"] == world.pki.ray_auth_token
    assert ray["head_address"] == "127.0.0.1:6390"
    assert ray["node_ip_address"] == "127.0.0.1"
    # container ports 70000.. as the container was told they are mapped
    assert ray["node_manager_port"] == 40000 and ray["object_manager_port"] == 40001
    assert ray["worker_ports"] == list(range(40002, 40018))
    assert first.doc["thresholds"]["heartbeat_interval_seconds"] == 1.0
    assert first.doc["thresholds"]["worker_gives_up_after_seconds"] == 3.0


def test_a_late_candidate_is_refused_and_ledgered(world: HeadWorld):
    request = world.place(slots=1)
    winner, late = world.rent(request), world.rent(request)
    assert world.enroll(winner).status == 200
    wait_for(lambda: gone(world, late.vast_id), timeout=5)

    refused = world.enroll(late)
    assert refused.status == 403
    assert_valid(messages.ERROR, refused.doc)
    assert refused.doc["error"] == "late_candidate"
    [entry] = world.ledger("late_candidate")
    assert entry.record == late.record_id and entry.data["refused"] == "late_candidate"


def test_a_request_already_filled_refuses_a_candidate_that_is_still_alive(world: HeadWorld):
    request = world.place(slots=1)
    candidate = world.rent(request)
    # the slot was settled some other way (the planner's expiry) while the candidate booted
    world.change(
        lambda r: replace(
            r,
            requests={request: replace(r.requests[request], status=RequestStatus.EXPIRED)},
        )
    )
    refused = world.enroll(candidate)
    assert (refused.status, refused.doc["error"]) == (403, "late_candidate")
    assert not gone(world, candidate.vast_id)  # the candidate destroys itself, not the head
    assert world.ledger("late_candidate")


def test_a_second_enrollment_of_the_same_instance_is_refused(world: HeadWorld):
    request = world.place(slots=1)
    rented = world.rent(request)
    assert world.enroll(rented, boot_id="aaaa1111").status == 200

    restarted = world.enroll(rented, boot_id="bbbb2222")  # a container restart: a new boot
    assert (restarted.status, restarted.doc["error"]) == (403, "second_enrollment")
    [entry] = world.ledger("second_enrollment")
    assert entry.instance == rented.vast_id and entry.data["boot_id"] == "bbbb2222"

    # the same boot asking again (its answer was lost) is answered again, with a new certificate
    again = world.enroll(rented, boot_id="aaaa1111")
    assert again.status == 200
    assert again.doc["slot_id"] == f"{request}s1"
    assert world.record(rented.record_id).role is Role.WORKER


def test_an_answer_asked_for_again_revokes_the_certificate_of_the_lost_one(world: HeadWorld):
    """Issue 13: a retried enrollment of the same boot left the earlier certificate valid."""
    request = world.place(slots=1)
    rented = world.rent(request)
    lost = world.enroll(rented, boot_id="aaaa1111")  # this answer never reached the container
    again = world.enroll(rented, boot_id="aaaa1111")
    assert lost.status == again.status == 200
    record = world.record(rented.record_id)
    assert (
        record.cert_serial is not None and record.cert_serial not in world.records().revoked_certs
    )
    assert len(world.records().revoked_certs) == 1  # the lost answer's serial
    refused = world.heartbeat(lost.doc, client=client_pair(lost.doc))
    assert (refused.status, refused.doc["error"]) == (403, "revoked")
    assert world.heartbeat(again.doc, client=client_pair(again.doc)).status == 200


def test_a_reused_token_from_another_instance_fails_the_token_check(world: HeadWorld):
    request = world.place(slots=2)
    owner, thief = world.rent(request), world.rent(request)
    assert world.enroll(owner).status == 200
    listed_at(world, thief, "127.0.0.1")  # vast lists the thief at the address it posts from

    reused = world.enroll(owner, instance_id=thief.vast_id)  # owner's token, thief's instance
    assert (reused.status, reused.doc["error"]) == (403, "token_check_failed")
    # the head destroys the instance that failed its token check: it provably came from it
    wait_for(lambda: gone(world, thief.vast_id), timeout=5)
    wait_for(lambda: world.record(thief.record_id).phase is Phase.DESTROYED, timeout=5)
    assert not gone(world, owner.vast_id)
    assert world.record(thief.record_id).ended_reason == "token_check_failed"
    entries = world.ledger("token_check_failed")
    assert [e.kind.value for e in entries] == ["detection", "decision", "call", "outcome"]
    assert all(e.record == thief.record_id for e in entries)


def test_an_unknown_token_destroys_only_our_instance_and_only_from_its_own_address(
    world: HeadWorld,
):
    request = world.place(slots=1)
    ours = world.rent(request)
    listed_at(world, ours, "203.0.113.9")  # vast lists it elsewhere: this post is a stranger's
    forged = world.enroll(ours, token="not-a-token-the-head-ever-made")
    assert (forged.status, forged.doc["error"]) == (403, "token_check_failed")
    assert world.record(ours.record_id).intent is Intent.RUNNING and not gone(world, ours.vast_id)

    listed_at(world, ours, "127.0.0.1")  # now the post provably comes from the instance
    from_itself = world.enroll(ours, token="not-a-token-the-head-ever-made")
    assert (from_itself.status, from_itself.doc["error"]) == (403, "token_check_failed")
    wait_for(lambda: gone(world, ours.vast_id), timeout=5)

    stranger = world.enroll(ours, token="not-a-token-the-head-ever-made", instance_id=99_999)
    assert (stranger.status, stranger.doc["error"]) == (403, "token_check_failed")
    detections = [e for e in world.ledger("token_check_failed") if e.kind.value == "detection"]
    # the stranger's two refusals are noted in aggregate: one line per source and class a minute
    assert [e.instance for e in detections] == [ours.vast_id, ours.vast_id]
    assert "not the instance's address" in detections[0].message
    assert "from its own address 127.0.0.1" in detections[1].message


def listed_at(world: HeadWorld, rented: object, address: str) -> None:
    """What the planner's refresh records when vast's listing shows the instance at `address`."""
    record_id = rented.record_id  # type: ignore[attr-defined]
    world.change(lambda r: put(r, replace(r.instances[record_id], listed_ip=address)))


def test_an_expired_token_is_refused(world: HeadWorld):
    request = world.place(slots=1)
    rented = world.rent(request)
    token = next(iter(world.records().tokens.values()))
    world.clock.advance(token.expires_at - token.issued_at + 1)

    expired = world.enroll(rented)
    assert (expired.status, expired.doc["error"]) == (403, "token_expired")
    [entry] = world.ledger("token_expired")
    assert entry.record == rented.record_id
    assert world.record(rented.record_id).role is Role.CANDIDATE


def test_the_token_is_stored_only_hashed_and_before_the_create(world: HeadWorld):
    request = world.place(slots=1)
    rented = world.rent(request)
    digest = hashlib.sha256(rented.token.encode()).hexdigest()
    # the save before the create already held the hash; no save ever held the token
    first_with_token = next(i for i, r in enumerate(world.saved) if r.tokens)
    assert world.saved[first_with_token].instances[rented.record_id].vast_id is None
    assert list(world.saved[first_with_token].tokens) == [digest]
    for records in world.saved:
        assert rented.token not in json.dumps(encode(records))
    token = world.records().tokens[digest]
    assert token.record_id == rented.record_id and token.used_at is None
    assert world.enroll(rented).status == 200
    spent = world.records().tokens[digest]
    assert spent.used_at is not None and spent.boot_id == "b0b0b0b0"


def test_malformed_enrollments_and_holds_are_answered_without_a_decision(world: HeadWorld):
    bad = world.call("POST", "/enroll", {"protocol": 1, "token": "x"})
    assert bad.status == 400 and bad.doc["error"] == "bad_request"
    assert world.ledger("bad_agent_message")

    world.service.app.accepting_enrollments = False
    request = world.place(slots=1)
    held = world.enroll(world.rent(request))
    assert (held.status, held.doc["error"]) == (503, "not_ready")
    assert world.call("GET", "/nowhere").status == 404


def test_the_agent_download_is_the_bundle_with_its_hash(world: HeadWorld):
    reply = world.call("GET", "/agent", raw=True)
    assert reply.status == 200
    bundle = AgentBundle.load()
    assert reply.doc == bundle.data
    assert reply.headers["X-RV-Agent-SHA256"] == hashlib.sha256(reply.doc).hexdigest()
    names = zipfile.ZipFile(io.BytesIO(reply.doc)).namelist()
    assert "agent/main.py" in names and "agent/bootloader.py" in names
    assert AgentBundle.load().sha256 == bundle.sha256  # deterministic


def test_no_create_request_env_or_log_carries_the_account_key(world: HeadWorld, caplog):
    request = world.place(slots=2)
    rented = [world.rent(request) for _ in range(3)]
    assert world.enroll(rented[0]).status == 200
    reply = world.enroll(rented[1])
    assert reply.status == 200
    for r in rented:
        create = r.create
        carried = [create.image, create.label, *create.env, *create.env.values(), *create.args]
        assert not any(KEY in value for value in carried)
        instance = world.sim.instance(r.vast_id)
        assert instance is not None
        assert not any(KEY in k or KEY in v for k, v in instance.env)
    assert KEY not in json.dumps(reply.doc)
    ledger = world.ledger_path.read_text()
    assert KEY not in ledger
    assert not any(r.token in ledger or r.token in caplog.text for r in rented)  # nor the tokens
    assert KEY not in caplog.text
    for records in world.saved:
        assert KEY not in json.dumps(encode(records))
