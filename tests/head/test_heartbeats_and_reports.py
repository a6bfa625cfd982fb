"""Port B (mutual TLS) and the report endpoint, over real sockets.

A worker's heartbeat with its enrollment certificate is taken; one without a certificate, with a
certificate of another cluster's CA, or with a revoked one is refused, and every refusal is in the
ledger. Reports are kept in the ledger (and the head's log) whether or not the head trusts them.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.head import decisions, messages, pki
from reconciler.model.records import Intent, Phase
from tests.waiting import wait_for

from .harness import (
    HeadWorld,
    client_pair,
    enroll_body,
    head_world,
    heartbeat_body,
)
from .schemas import assert_valid


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        w.service.app.unproven.every = 0.0  # every refusal noted: the tests read each one
        yield w


def enrolled(world: HeadWorld) -> tuple[dict, pki.Issued]:
    request = world.place(slots=1)
    rented = world.rent(request)
    reply = world.enroll(rented)
    assert reply.status == 200, reply.doc
    return reply.doc, client_pair(reply.doc)


def test_a_worker_heartbeat_is_taken_and_moves_its_report_clock(world: HeadWorld):
    answer, client = enrolled(world)
    record_id = answer["record_id"]
    before = world.record(record_id).self_report_at
    body = heartbeat_body(answer, state="starting", cpu=0.5)
    assert_valid(messages.HEARTBEAT, body)

    time.sleep(0.05)
    reply = world.call("POST", "/heartbeat", body, port="heartbeat", client=client)
    assert reply.status == 200, reply.doc
    assert_valid(messages.HEARTBEAT, reply.doc, "answer")
    record = world.record(record_id)
    assert record.self_report_at > before
    assert record.phase is Phase.ENROLLED  # Ray not up yet
    assert record.sample_at == record.self_report_at and record.sample_busy is True

    reply = world.heartbeat(answer, client=client, seq=2, state="running")
    assert reply.status == 200
    record = world.record(record_id)
    assert record.phase is Phase.SERVING and record.sample_busy is False
    assert [e.record for e in world.ledger("serving")] == [record_id]
    assert world.ledger("heartbeat_refused") == []


def test_a_heartbeat_without_a_client_certificate_is_refused(world: HeadWorld):
    answer, _ = enrolled(world)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        world.heartbeat(answer, client=None)
    [entry] = wait_for(lambda: world.ledger("heartbeat_refused"), timeout=5)
    assert entry.data["refused"] == "tls" and entry.data["port"] == "heartbeat"
    assert "certificate" in entry.message.lower()


def test_a_certificate_from_another_clusters_ca_is_refused(world: HeadWorld):
    answer, _ = enrolled(world)
    now = time.time()
    other_ca = pki.new_ca("other", now=now)
    forged = pki.issue_worker(
        other_ca,
        cluster="hc",
        record_id=answer["record_id"],
        instance_id=answer["instance_id"],
        slot_id=answer["slot_id"],
        serial=pki.new_serial(),
        now=now,
    )
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        world.heartbeat(answer, client=forged)
    [entry] = wait_for(lambda: world.ledger("heartbeat_refused"), timeout=5)
    assert entry.data["refused"] == "tls"
    assert world.record(answer["record_id"]).intent is Intent.RUNNING


def test_a_revoked_certificate_is_refused(world: HeadWorld):
    answer, client = enrolled(world)
    serial = int(answer["certificate"]["serial"], 16)
    world.change(lambda r: decisions.revoke(r, serial))

    reply = world.heartbeat(answer, client=client)
    assert (reply.status, reply.doc["error"]) == (403, "revoked")
    assert_valid(messages.ERROR, reply.doc)
    [entry] = world.ledger("heartbeat_refused")
    assert entry.data["refused"] == "revoked" and entry.record == answer["record_id"]


def test_a_destroyed_worker_is_refused_and_its_certificate_revoked(world: HeadWorld):
    answer, client = enrolled(world)
    record_id = answer["record_id"]
    world.change(
        lambda r: decisions.put(
            r, decisions.doomed(r.instances[record_id], "went_silent", time.time())
        )
    )
    reply = world.heartbeat(answer, client=client)
    assert (reply.status, reply.doc["error"]) == (403, "unknown_worker")
    assert int(answer["certificate"]["serial"], 16) in world.records().revoked_certs
    assert world.heartbeat(answer, client=client).doc["error"] == "revoked"
    assert len(world.ledger("heartbeat_refused")) == 2


def test_a_heartbeat_speaking_for_another_instance_is_refused(world: HeadWorld):
    answer, client = enrolled(world)
    reply = world.heartbeat(answer, client=client, instance_id=answer["instance_id"] + 1)
    assert (reply.status, reply.doc["error"]) == (403, "unknown_worker")
    assert world.ledger("heartbeat_refused")


def test_a_report_is_ledgered_and_ends_the_record(world: HeadWorld, caplog):
    request = world.place(slots=1)
    rented = world.rent(request)
    report = {
        "protocol": 1,
        "token": rented.token,
        "instance_id": rented.vast_id,
        "boot_id": "c0ffee00",
        "record_id": rented.record_id,
        "phase": "candidate",
        "reason": "no_enrollment",
        "detail": "not enrolled within 4s",
        "at": time.time(),
    }
    assert_valid(messages.REPORT, report)
    with caplog.at_level(logging.WARNING, logger="reconciler.head"):
        reply = world.call("POST", "/report", report)
    assert reply.status == 200
    assert_valid(messages.REPORT, reply.doc, "answer")
    [entry] = world.ledger("worker_report")
    assert entry.record == rented.record_id and entry.instance == rented.vast_id
    assert entry.data["reason"] == "no_enrollment" and entry.data["trusted"] is True
    assert "not enrolled within 4s" in entry.message
    assert "no_enrollment" in caplog.text  # the head's log keeps it too
    record = world.record(rented.record_id)
    assert record.intent is Intent.DESTROYED and record.phase is Phase.DESTROYING
    assert record.ended_reason == "worker report: no_enrollment"


def test_an_untrusted_report_is_still_ledgered(world: HeadWorld):
    request = world.place(slots=1)
    rented = world.rent(request)
    report = {
        "protocol": 1,
        "token": "somebody-elses-token",
        "instance_id": rented.vast_id,
        "boot_id": "c0ffee00",
        "phase": "worker",
        "reason": "signal",
        "detail": "SIGTERM to PID 1",
        "at": time.time(),
    }
    reply = world.call("POST", "/report", report)
    assert (reply.status, reply.doc["error"]) == (403, "token_check_failed")
    [entry] = world.ledger("worker_report")
    assert entry.data["trusted"] is False and "SIGTERM" in entry.message
    assert world.record(rented.record_id).intent is Intent.RUNNING


def test_in_process_calls_need_no_socket(world: HeadWorld):
    app = world.service.app
    request = world.place(slots=1)
    rented = world.rent(request)
    answer = app.enroll(json.dumps(enroll_body(rented)).encode())
    assert answer.status == 200
    doc = answer.json()
    beat = json.dumps(heartbeat_body(doc)).encode()
    der = ssl.PEM_cert_to_DER_cert(doc["certificate"]["cert_pem"])
    assert app.heartbeat(der, beat).status == 200
    refused = app.heartbeat(None, beat)
    assert (refused.status, refused.json()["error"]) == (403, "unknown_worker")
