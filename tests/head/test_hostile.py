"""A stranger on the internet against the head's two TLS ports, over real sockets.

DESIGN.md 10 ("Who may cause a destroy from the network"): nothing that reaches the head without
proof ends, stops or changes a machine or a record. Proof is a valid join token for that instance,
or that worker's client certificate on port B; a failed token check destroys the presenting
instance only when the request comes from the instance's own address. Every request here comes
from `STRANGER` (a loopback address no instance has: the simulator's are never in 127.0.0.0/24),
while the real workers post from 127.0.0.1 through the harness. After each attack the records
(less the aggregate alert bookkeeping), the revocation set and the simulator's instances are
exactly as before, nothing was destroyed or stopped at vast, and the refusals cost a handful of
ledger lines, not one each.

Connection-level limits (slowloris, header sizes, connections per source) are tested elsewhere.
"""

from __future__ import annotations

import http.client
import json
import re
import secrets
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from reconciler.head import decisions, limits, pki, tls
from reconciler.head.pki import Issued
from reconciler.model.records import Intent, Phase, Records
from reconciler.state.ledger import LedgerEntry

from ..waiting import wait_for
from .harness import (
    LINEAGE,
    HeadWorld,
    Rented,
    client_pair,
    head_world,
    heartbeat_body,
)

STRANGER = "127.0.0.77"  # no instance's address: not in vast's listing, not enrolled from
OTHER_LINEAGE = "0e0e0e0e-1111-4222-8333-444455556666"  # another state's records
UNKNOWN_ID = 99_999  # no record, no instance
# Answers a refused post may carry (never 2xx, never 5xx)
REFUSED = {400, 403, 404, 411, 413, 429}


# --- a stranger's client -------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    doc: Any
    headers: dict[str, str] = field(default_factory=dict)


def post(
    world: HeadWorld,
    path: str,
    body: bytes | dict[str, Any],
    *,
    port: str = "enroll",
    client: Issued | None = None,
    source: str = STRANGER,
) -> Answer:
    """One HTTPS POST from `source` (a new connection each time, closed before returning)."""
    endpoints = world.service.endpoints
    number = endpoints.heartbeat_port if port == "heartbeat" else endpoints.enroll_port
    context = tls.client_context(world.pki.ca_pem, client=client)
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn = http.client.HTTPSConnection(
        "127.0.0.1", number, context=context, timeout=10, source_address=(source, 0)
    )
    try:
        conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        data = reply.read()
        try:
            doc = json.loads(data)
        except ValueError:
            doc = data
        return Answer(reply.status, doc, dict(reply.getheaders()))
    finally:
        conn.close()


def refused_at_handshake(world: HeadWorld, body: dict[str, Any], client: Issued | None) -> bool:
    """Whether port B refuses this client before any HTTP (True), or answers (an AssertionError
    naming the answer: no HTTP answer at all is what a refused certificate must get)."""
    try:
        answer = post(world, "/heartbeat", body, port="heartbeat", client=client)
    except (ssl.SSLError, OSError):  # refused handshake; reset or closed before an answer
        return True
    raise AssertionError(f"port B answered {answer.status}: {answer.doc!r}")


def plain_http(world: HeadWorld, port: int, request: bytes) -> bytes:
    """Plain HTTP (no TLS) from the stranger: every byte the head sends back until it closes."""
    with socket.create_connection(
        ("127.0.0.1", port), timeout=10, source_address=(STRANGER, 0)
    ) as sock:
        sock.sendall(request)
        received = b""
        try:
            while chunk := sock.recv(4096):
                received += chunk
        except ConnectionResetError:
            pass
        return received


# --- a cluster to attack -------------------------------------------------------------------


@dataclass
class Cluster:
    """Records of every kind, each with a machine at vast (but the ended one)."""

    worker: Rented  # enrolled, heartbeating
    worker_answer: dict[str, Any]
    worker_client: Issued
    other_worker: Rented  # enrolled; its request's extra candidate was destroyed
    candidates: tuple[Rented, Rented]  # rented, not enrolled yet
    ended: Rented  # destroyed (an extra candidate), record kept
    foreign: Rented  # a record of another state (lineage), listed at the stranger's address

    def targets(self) -> dict[str, int]:
        """Every kind of instance id a forged message may name."""
        return {
            "candidate": self.candidates[0].vast_id,
            "worker": self.worker.vast_id,
            "ended": self.ended.vast_id,
            "foreign": self.foreign.vast_id,
            "unknown": UNKNOWN_ID,
        }


def build_cluster(world: HeadWorld) -> Cluster:
    first = world.place(slots=1)
    worker = world.rent(first)
    answer = enrolled(world, worker)
    client = client_pair(answer)
    assert world.heartbeat(answer, client=client).status == 200  # serving from here on

    second = world.place(slots=1)
    other, extra = world.rent(second), world.rent(second)
    enrolled(world, other)  # the last slot filled: the extra candidate is destroyed
    wait_for(lambda: world.record(extra.record_id).phase is Phase.DESTROYED, timeout=10)

    third = world.place(slots=2)
    candidates = (world.rent(third), world.rent(third))
    foreign = world.rent(third)

    def foreign_state(records: Records) -> Records:
        record = replace(
            records.instances[foreign.record_id], managed_by=OTHER_LINEAGE, request_id=None
        )
        return decisions.put(records, record)

    world.change(foreign_state)
    # what the planner's refresh records: vast lists every live machine at its own address
    for rented in (worker, other, *candidates):
        listed(world, rented, world.sim.instances[rented.vast_id].public_ip)
    listed(world, foreign, STRANGER)  # not ours: even its own address may not end it
    for record in world.records().instances.values():
        if record.managed_by == LINEAGE:  # the stranger is none of ours
            assert STRANGER not in {record.listed_ip, record.public_ip}
    world.service.applier.drain(10)
    return Cluster(worker, answer, client, other, candidates, extra, foreign)


def enrolled(world: HeadWorld, rented: Rented) -> dict[str, Any]:
    reply = world.enroll(rented)
    assert reply.status == 200, reply.doc
    doc: dict[str, Any] = reply.doc
    return doc


def listed(world: HeadWorld, rented: Rented, address: str) -> None:
    world.change(
        lambda r: decisions.put(r, replace(r.instances[rented.record_id], listed_ip=address))
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        yield w


@pytest.fixture
def cluster(world: HeadWorld) -> Cluster:
    return build_cluster(world)


# --- what "nothing changed" means ----------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    records: Records  # with the alerts left out: the one bookkeeping a refusal may add
    at_vast: dict[int, tuple[str, str]]  # live instance -> (intended status, label)
    vast_changes: int  # destroy, stop and start calls the simulator has served
    ledger_lines: int


def snapshot(world: HeadWorld) -> Snapshot:
    assert world.service.applier.drain(10)
    at_vast = {
        i: (inst.intended_status, inst.label or "") for i, inst in world.sim.instances.items()
    }
    changes = sum(
        n
        for route, n in world.sim.counters.items()
        if route.startswith(("DELETE ", "PUT /api/v0/instances"))
    )
    records = replace(world.records(), alerts=())
    return Snapshot(records, at_vast, changes, len(world.ledger()))


def assert_unchanged(world: HeadWorld, before: Snapshot) -> list[LedgerEntry]:
    """Everything as before (but the alerts); the ledger lines written since, returned."""
    after = snapshot(world)
    assert after.records.instances == before.records.instances
    assert after.records.requests == before.records.requests
    assert after.records.tokens == before.records.tokens
    assert after.records.revoked_certs == before.records.revoked_certs
    assert after.records == before.records  # and the rest (breakers, blocklist, ...)
    assert after.at_vast == before.at_vast
    assert after.vast_changes == before.vast_changes
    return world.ledger()[before.ledger_lines :]


def new_alerts_are_unproven_aggregates(world: HeadWorld, before: Records) -> None:
    """The alerts a stranger may add: of an alerting refusal class, on no record."""
    added = [a for a in world.records().alerts if a not in before.alerts]
    assert all(a.record is None for a in added), added
    assert {a.cls for a in added} <= {"token_check_failed", "bad_agent_message"}, added


def forged_enrollment(instance_id: int, token: str, *, public_ip: str) -> dict[str, Any]:
    return {
        "protocol": 1,
        "token": token,
        "instance_id": instance_id,
        "boot_id": secrets.token_hex(8),
        "public_ip": public_ip,
        "ports": {"7000": 40000},
        "machine": {"cpus": 64, "cpu_source": "forged", "gpus": 8},
    }


def forged_report(instance_id: int, token: str, record_id: str | None) -> dict[str, Any]:
    return {
        "protocol": 1,
        "token": token,
        "instance_id": instance_id,
        "boot_id": secrets.token_hex(8),
        "record_id": record_id,
        "phase": "worker",
        "reason": "signal",
        "detail": "SIGTERM to PID 1",
        "at": time.time(),
    }


def made_up_token() -> str:
    return secrets.token_urlsafe(32)


def heartbeat_ok(world: HeadWorld, cluster: Cluster, seq: int) -> bool:
    reply = world.heartbeat(cluster.worker_answer, client=cluster.worker_client, seq=seq)
    return reply.status == 200 and reply.doc["ok"] is True


# --- forged enrollments and reports ---------------------------------------------------------


def test_forged_enrollments_naming_any_record_change_nothing(world: HeadWorld, cluster: Cluster):
    world.service.app.buckets = limits.SourceBuckets(burst=1_000)  # every post reaches a decision
    before = snapshot(world)
    records = world.records()
    by_vast = {r.vast_id: r for r in records.instances.values()}
    others_token = cluster.candidates[1].token  # a real token, of another instance
    cases = []
    for kind, vast_id in cluster.targets().items():
        target = by_vast.get(vast_id)
        claimed = (target.listed_ip if target else None) or "203.0.113.7"
        for token_kind, token in (("made-up", made_up_token()), ("another's", others_token)):
            # the body claims the victim's own address: a claim is not proof
            cases.append((kind, token_kind, forged_enrollment(vast_id, token, public_ip=claimed)))
    # the worker's real token (already used) naming another worker, and the candidate
    for kind in ("candidate", "worker"):
        body = forged_enrollment(
            cluster.targets()[kind], cluster.other_worker.token, public_ip=STRANGER
        )
        cases.append((kind, "a worker's", body))

    for kind, token_kind, body in cases:
        answer = post(world, "/enroll", body)
        assert (answer.status, answer.doc["error"]) == (403, "token_check_failed"), (
            kind,
            token_kind,
            answer.doc,
        )

    lines = assert_unchanged(world, before)
    # one line for all of them: unproven refusals are noted per source and class a minute
    assert [(e.class_, e.data["peer"], e.data["count"]) for e in lines] == [
        ("token_check_failed", STRANGER, 1)
    ]
    assert world.service.app.unproven.totals() == {(STRANGER, "token_check_failed"): len(cases)}
    new_alerts_are_unproven_aggregates(world, records)
    # and the candidates can still enroll with their own tokens
    assert world.enroll(cluster.candidates[0]).status == 200


def test_forged_reports_naming_any_record_change_nothing(world: HeadWorld, cluster: Cluster):
    world.service.app.buckets = limits.SourceBuckets(burst=1_000)
    before = snapshot(world)
    records = world.records()
    by_vast = {r.vast_id: r for r in records.instances.values()}
    others_token = cluster.candidates[1].token
    posts = 0
    for kind, vast_id in cluster.targets().items():
        record = by_vast.get(vast_id)
        record_id = record.id if record else "i999"
        for token in (made_up_token(), others_token, "x"):
            answer = post(world, "/report", forged_report(vast_id, token, record_id))
            posts += 1
            assert (answer.status, answer.doc["error"]) == (403, "token_check_failed"), (
                kind,
                answer.doc,
            )

    lines = assert_unchanged(world, before)
    # still kept (vast keeps no container log), but once a minute per source, with the count
    assert [(e.class_, e.data["trusted"], e.data["peer"]) for e in lines] == [
        ("worker_report", False, STRANGER)
    ]
    assert world.service.app.unproven.totals() == {(STRANGER, "worker_report"): posts}
    assert world.records().alerts == records.alerts  # a report alerts nobody
    # the worker it named still heartbeats as before
    assert heartbeat_ok(world, cluster, seq=2)
    record = world.record(cluster.worker.record_id)
    assert (record.intent, record.phase) == (Intent.RUNNING, Phase.SERVING)


def test_a_loop_over_fifty_sequential_instance_ids_ends_nothing(world: HeadWorld, cluster: Cluster):
    """Issue 13: vast instance ids are sequential, so a loop over ids ended a whole cluster."""
    app = world.service.app
    app.buckets = limits.SourceBuckets(burst=1_000)  # no 429: every id reaches the token check
    before = snapshot(world)
    alerts_before = world.records()
    ours = sorted(r.vast_id for r in world.records().instances.values() if r.vast_id)
    ids = range(ours[0] - 5, ours[0] + 45)
    assert set(ours) <= set(ids) and len(ids) == 50

    for vast_id in ids:
        body = forged_enrollment(vast_id, made_up_token(), public_ip="127.0.0.1")
        answer = post(world, "/enroll", body)
        assert (answer.status, answer.doc["error"]) == (403, "token_check_failed"), vast_id

    lines = assert_unchanged(world, before)
    assert [(e.class_, e.data["count"]) for e in lines] == [("token_check_failed", 1)]
    assert app.unproven.totals() == {(STRANGER, "token_check_failed"): 50}
    new_alerts_are_unproven_aggregates(world, alerts_before)
    assert all(world.sim.instances.get(i) is not None for i in ours if i != cluster.ended.vast_id)

    # a minute later the next refusal is noted again, carrying what was counted meanwhile
    world.clock.advance(61)
    post(world, "/enroll", forged_enrollment(ours[0], made_up_token(), public_ip="127.0.0.1"))
    [line] = world.ledger()[before.ledger_lines + len(lines) :]
    assert (line.class_, line.data["count"]) == ("token_check_failed", 50)
    assert "[50 such from 127.0.0.77" in line.message


FLOOD = 300


def test_a_flood_from_one_stranger_is_throttled_and_the_workers_heartbeats_pass(
    world: HeadWorld, cluster: Cluster
):
    app = world.service.app
    before = snapshot(world)
    worker_id = cluster.worker.record_id
    victim = cluster.worker.vast_id
    junk: list[tuple[str, bytes | dict[str, Any]]] = [
        ("/enroll", b"\x00\xffnot json"),
        ("/enroll", forged_enrollment(victim, made_up_token(), public_ip="127.0.0.1")),
        ("/report", forged_report(victim, made_up_token(), worker_id)),
        ("/report", b'{"protocol": 1}'),
        ("/enroll", b"[]"),
    ]
    answers: list[Answer] = []
    halfway = threading.Event()
    resume = threading.Event()
    failures: list[BaseException] = []

    def flood() -> None:
        try:
            for n in range(FLOOD):
                if n == FLOOD // 2:
                    halfway.set()
                    resume.wait(10)
                path, body = junk[n % len(junk)]
                answers.append(post(world, path, body))
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)
            halfway.set()

    started = time.time()
    thread = threading.Thread(target=flood, name="stranger-flood", daemon=True)
    thread.start()
    beats = []
    try:
        assert halfway.wait(30)
        beats.append(heartbeat_ok(world, cluster, seq=10))  # in the middle of the flood
        resume.set()
        seq = 11
        while thread.is_alive():  # and while it goes on
            beats.append(heartbeat_ok(world, cluster, seq=seq))
            seq += 1
    finally:
        resume.set()
        thread.join(60)
    elapsed = time.time() - started
    assert not failures, failures
    assert not thread.is_alive()
    assert beats and all(beats), beats

    statuses = [a.status for a in answers]
    assert len(statuses) == FLOOD and set(statuses) <= REFUSED, Counter(statuses)
    # the bucket starts full (20), refills at 2/s: past that, 429 with Retry-After
    assert 429 not in statuses[: int(limits.BURST)]
    served = sum(1 for s in statuses if s != 429)
    assert served <= limits.BURST + limits.PER_SECOND * elapsed + 1, (served, elapsed)
    assert all(a.headers.get("Retry-After") == "1" for a in answers if a.status == 429)
    assert app.buckets.refused == FLOOD - served

    # nothing changed but the worker's own heartbeats (its report clock and sample time)
    after = snapshot(world)
    was, now = before.records.instances[worker_id], after.records.instances[worker_id]
    assert now.self_report_at is not None and was.self_report_at is not None
    assert now.self_report_at > was.self_report_at
    beaten = replace(was, self_report_at=now.self_report_at, sample_at=now.sample_at)
    assert after.records.instances == {**before.records.instances, worker_id: beaten}
    assert replace(after.records, instances=before.records.instances) == before.records
    assert (after.at_vast, after.vast_changes) == (before.at_vast, before.vast_changes)

    # a few ledger lines for 300 posts: at most one per class from this source
    lines = world.ledger()[before.ledger_lines :]
    classes = Counter(e.class_ for e in lines)
    aggregated = {"bad_agent_message", "token_check_failed", "worker_report", "rate_limited"}
    assert set(classes) <= aggregated
    assert all(n == 1 for n in classes.values()), classes
    assert all(e.data["peer"] == STRANGER for e in lines)
    assert sum(n for (src, _), n in app.unproven.totals().items() if src == STRANGER) == FLOOD


# --- port B ----------------------------------------------------------------------------------


def impostors(world: HeadWorld, cluster: Cluster) -> dict[str, Issued]:
    """Client certificates naming the worker that port B must refuse at the handshake."""
    answer = cluster.worker_answer
    identity = {
        "cluster": world.spec.name,
        "record_id": answer["record_id"],
        "instance_id": answer["instance_id"],
        "slot_id": answer["slot_id"],
    }
    now = time.time()
    other_ca = pki.new_ca(world.spec.name, now=now)  # same cluster name, another CA
    return {
        "another cluster's CA": pki.issue_worker(
            other_ca, **identity, serial=int(answer["certificate"]["serial"], 16), now=now
        ),
        # the cluster's own CA, but its validity ended a day ago
        "expired": pki.issue_worker(
            world.pki.ca,
            **identity,
            serial=pki.new_serial(),
            now=now - 3 * pki.DAY,
            validity=2 * pki.DAY,
        ),
    }


def test_port_b_refuses_foreign_expired_and_missing_certificates(
    world: HeadWorld, cluster: Cluster
):
    app = world.service.app
    attempts: dict[str, Issued | None] = {**impostors(world, cluster), "no certificate": None}
    expired = attempts["expired"]
    assert expired is not None and expired.not_after < time.time() - pki.DAY
    before = snapshot(world)
    body = heartbeat_body(cluster.worker_answer, seq=5)
    for what, client in attempts.items():
        assert refused_at_handshake(world, body, client), what

    def counted() -> int:
        return app.unproven.totals().get((STRANGER, "heartbeat_refused"), 0)

    wait_for(lambda: counted() == len(attempts), timeout=10, what="every handshake counted")
    lines = assert_unchanged(world, before)
    assert [(e.class_, e.data["refused"], e.data["peer"]) for e in lines] == [
        ("heartbeat_refused", "tls", STRANGER)
    ]
    # the worker itself is still let in
    assert heartbeat_ok(world, cluster, seq=6)


def test_port_b_refuses_a_revoked_certificate_and_changes_nothing(
    world: HeadWorld, cluster: Cluster
):
    serial = int(cluster.worker_answer["certificate"]["serial"], 16)
    world.change(lambda r: decisions.revoke(r, serial))
    before = snapshot(world)
    body = heartbeat_body(cluster.worker_answer, seq=5)
    for source in (STRANGER, "127.0.0.1"):  # a stolen copy, or the worker itself
        client = cluster.worker_client
        answer = post(world, "/heartbeat", body, port="heartbeat", client=client, source=source)
        assert (answer.status, answer.doc["error"]) == (403, "revoked")
    lines = assert_unchanged(world, before)
    assert [(e.class_, e.data["refused"], e.record) for e in lines] == [
        ("heartbeat_refused", "revoked", cluster.worker.record_id)
    ] * 2
    assert world.records().revoked_certs.count(serial) == 1


def test_plain_http_on_both_tls_ports_is_refused(world: HeadWorld, cluster: Cluster):
    app = world.service.app
    endpoints = world.service.endpoints
    before = snapshot(world)
    victim = json.dumps(
        forged_enrollment(cluster.worker.vast_id, made_up_token(), public_ip="127.0.0.1")
    ).encode()
    requests = {
        endpoints.enroll_port: [
            b"POST /enroll HTTP/1.1\r\nHost: head\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(victim)
            + victim,
            b"GET /agent HTTP/1.0\r\n\r\n",
        ],
        endpoints.heartbeat_port: [b"POST /heartbeat HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"],
    }
    for port, sent in requests.items():
        for request in sent:
            received = plain_http(world, port, request)
            assert not received.startswith(b"HTTP/"), (port, received[:80])

    def counted() -> dict[str, int]:
        totals = app.unproven.totals()
        return {cls: totals.get((STRANGER, cls), 0) for cls in ("tls_refused", "heartbeat_refused")}

    wait_for(lambda: counted() == {"tls_refused": 2, "heartbeat_refused": 1}, timeout=10)
    lines = assert_unchanged(world, before)
    assert sorted((e.class_, e.data["refused"]) for e in lines) == [
        ("heartbeat_refused", "tls"),
        ("tls_refused", "tls"),
    ]
    # a refused handshake alerts nobody
    assert all(a.cls not in {"tls_refused", "heartbeat_refused"} for a in world.records().alerts)


# --- bodies that once raised in the head (answered 500) ----------------------------------------


def _deep(world: HeadWorld, cluster: Cluster) -> bytes:
    return b"[" * 60_000  # under the 64 KiB body limit


def _long_integer(world: HeadWorld, cluster: Cluster) -> bytes:
    return b'{"protocol": ' + b"1" * 5_000 + b"}"


def _surrogate_token(world: HeadWorld, cluster: Cluster) -> bytes:
    body = forged_enrollment(cluster.worker.vast_id, "x", public_ip="127.0.0.1")
    return json.dumps({**body, "token": "\ud800" * 20}).encode()  # an escape: valid JSON


def _non_finite_report_time(world: HeadWorld, cluster: Cluster) -> bytes:
    report = forged_report(cluster.worker.vast_id, made_up_token(), None)
    return json.dumps({**report, "at": float("nan")}).encode()  # `NaN`: Python's json reads it


def _report_time_past_float(world: HeadWorld, cluster: Cluster) -> bytes:
    report = json.dumps(forged_report(cluster.worker.vast_id, made_up_token(), None))
    return re.sub(r'"at": [^,}]+', '"at": 1' + "0" * 400, report).encode()


def _float_instance_id(world: HeadWorld, cluster: Cluster) -> bytes:
    body = forged_enrollment(cluster.worker.vast_id, made_up_token(), public_ip="127.0.0.1")
    return json.dumps({**body, "instance_id": float(cluster.worker.vast_id)}).encode()


@pytest.mark.parametrize(
    ("path", "make"),
    [
        ("/enroll", _deep),
        ("/enroll", _long_integer),
        ("/enroll", _surrogate_token),
        ("/report", _non_finite_report_time),
        ("/report", _report_time_past_float),
        ("/enroll", _float_instance_id),
    ],
    ids=[
        "deep-nesting",
        "long-integer",
        "surrogate-token",
        "nan-report-time",
        "report-time-past-float",
        "float-id",
    ],
)
def test_an_unproven_post_is_never_answered_5xx_and_changes_nothing(
    world: HeadWorld, cluster: Cluster, path: str, make: Any
):
    """Each of these once raised in the head (RecursionError, ValueError past 4300 digits,
    UnicodeEncodeError hashing the token, the ledger refusing NaN or a float `instance`,
    OverflowError in float()) and was answered 500."""
    before = snapshot(world)
    alerts_before = world.records()
    answer = post(world, path, make(world, cluster))
    assert answer.status in REFUSED, (answer.status, answer.doc)
    assert_unchanged(world, before)
    new_alerts_are_unproven_aggregates(world, alerts_before)
    assert heartbeat_ok(world, cluster, seq=3)
