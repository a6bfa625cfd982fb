"""Fuzzing every agent endpoint's body through the app, in-process (no sockets).

`HeadApp.enroll`, `HeadApp.report` and `HeadApp.heartbeat` get arbitrary bytes, arbitrary JSON and
mutations of valid bodies (wrong types, huge numbers, unicode, missing and extra fields) from
strangers' addresses, with made-up tokens or the real token of another instance. The property: the
answer is 4xx (never 5xx, never an exception), nothing is destroyed, and the records are exactly as
before but for `alerts`, the one documented bookkeeping of unproven traffic (an aggregate alert of
an alerting class, on no record). Heartbeats are fuzzed with no certificate, with certificates that
name no worker, and with a real worker's certificate; the holder of that one has proven who it is,
so a valid heartbeat of its own is taken (200: its report clock and sample move) and one that
speaks for another instance revokes its certificate, as `heartbeats` documents.

Every refusal is written to a real ledger file here (`unproven.every = 0`), so the ledger's own
checks (finite numbers, integer instance ids, encodable text) run on every example. The generators
include what Python's json takes and JSON does not mean: `NaN` and the infinities, numbers past
64 bits and past float range, integers longer than Python converts, nesting past the recursion
limit, lone surrogates (as escapes and as raw bytes), integral floats where the schema says
integer. Each of those, that once raised in the head, also has a test of its own below.
"""

from __future__ import annotations

import copy
import json
import math
import ssl
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from reconciler.clock import FakeClock
from reconciler.head import limits, messages, pki, tokens
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints
from reconciler.head.app import Answer, HeadApp
from reconciler.head.decisions import doomed
from reconciler.head.pki import ClusterPki, pki_dir
from reconciler.head.shared import SharedRecords
from reconciler.model.plan import Action
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request, RequestStatus, Slot
from reconciler.state.ledger import LedgerWriter, read_ledger

from .harness import LINEAGE, cluster_spec, hc_record

SPEC = cluster_spec()
NOW = 1_800_000_000.0
OTHER_LINEAGE = "0e0e0e0e-1111-4222-8333-444455556666"
BOOT = "b0b0b0b0"
# Strangers: no record's address (None: in-process, which proves nothing either)
PEERS = ("198.51.100.66", "198.51.100.67", "2001:db8::66", None)
ALERTING_UNPROVEN = {"token_check_failed", "bad_agent_message"}
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)

CANDIDATE_TOKEN = "candidate-i8-real-join-token-0123456789abcdef"
WORKER_TOKEN = "worker-i7-real-join-token-used-0123456789abcdef"


def record(ident: str, vast_id: int, **changes: Any) -> InstanceRecord:
    defaults: dict[str, Any] = {
        "phase": Phase.RENTING,
        "vast_id": vast_id,
        "listed_ip": f"203.0.113.{vast_id % 250}",
    }
    return hc_record(ident, created_at=NOW - 600, **{**defaults, **changes})


class RecordingApplier:
    """Takes every destroy asked for, and carries out none."""

    def __init__(self) -> None:
        self.asked: list[Action] = []

    def submit(self, actions: Sequence[Action]) -> None:
        self.asked.extend(actions)


class QuietLedger(LedgerWriter):
    """The real ledger file and every check it makes, without an fsync per line."""

    def _sync(self, fd: int) -> None:
        pass


@dataclass
class Head:
    app: HeadApp
    shared: SharedRecords
    original: Records
    applier: RecordingApplier
    ledger: QuietLedger
    worker_der: bytes
    worker_serial: int
    nameless_ders: tuple[bytes, ...]  # certificates (or bytes) that name no worker

    def reset(self) -> Records:
        self.shared.update(lambda _records: self.original)
        return self.shared.records()


def build_records(worker_serial: int) -> Records:
    instances = {
        # a worker, serving, whose certificate the fuzz holds
        "i7": record(
            "i7",
            700,
            role=Role.WORKER,
            phase=Phase.SERVING,
            request_id="q1",
            slot_id="q1s1",
            enrolled_at=NOW - 500,
            self_report_at=NOW - 10,
            public_ip="203.0.113.200",
            cert_serial=worker_serial,
        ),
        # a candidate of an open request, with an unused token
        "i8": record("i8", 701, request_id="q2"),
        # an ended record
        "i9": doomed(record("i9", 702, request_id="q2"), "went_silent", NOW - 100),
        # another state's record
        "i10": record("i10", 703, managed_by=OTHER_LINEAGE),
    }
    instances["i9"] = replace(instances["i9"], phase=Phase.DESTROYED)
    requests = {
        "q1": Request(
            "q1",
            "hc",
            "cpu",
            LINEAGE,
            NOW - 900,
            NOW + 3600,
            (Slot("q1s1", worker="i7"),),
            status=RequestStatus.FILLED,
        ),
        "q2": Request("q2", "hc", "cpu", LINEAGE, NOW - 900, NOW + 3600, (Slot("q2s1"),)),
    }
    join = {
        tokens.digest(CANDIDATE_TOKEN): tokens.join_token(
            CANDIDATE_TOKEN, cluster="hc", record_id="i8", now=NOW - 60, window=3600
        ),
        tokens.digest(WORKER_TOKEN): replace(
            tokens.join_token(WORKER_TOKEN, cluster="hc", record_id="i7", now=NOW - 600, window=60),
            used_at=NOW - 500,
            boot_id=BOOT,
        ),
    }
    return Records(instances=instances, requests=requests, tokens=join, revoked_certs=(12345,))


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    clock = FakeClock(NOW)
    cluster_pki = ClusterPki.load_or_create(
        pki_dir(tmp_path, "hc"), "hc", "127.0.0.1", now=clock.now()
    )
    serial = pki.new_serial()
    worker_cert = pki.issue_worker(
        cluster_pki.ca,
        cluster="hc",
        record_id="i7",
        instance_id=700,
        slot_id="q1s1",
        serial=serial,
        now=NOW,
    )
    worker_der = ssl.PEM_cert_to_DER_cert(worker_cert.cert_pem.decode())
    ca_der = ssl.PEM_cert_to_DER_cert(cluster_pki.ca_pem)
    server_der = ssl.PEM_cert_to_DER_cert(cluster_pki.server.cert_pem.decode())
    original = build_records(serial)
    shared = SharedRecords(original, save=lambda _records: None)
    ledger = QuietLedger.open(tmp_path / "ledger.jsonl", clock=clock)
    applier = RecordingApplier()
    app = HeadApp(
        spec=SPEC,
        cluster_pki=cluster_pki,
        host=shared,
        ledger=ledger,
        applier=applier,
        lineage=LINEAGE,
        clock=clock,
        endpoints=HeadEndpoints("127.0.0.1", 6390, 18443, 18444),
        agent=AgentBundle(b"", "0" * 64, ""),
    )
    app.unproven.every = 0.0  # every refusal reaches the ledger and its checks
    app.buckets = limits.SourceBuckets(burst=1e12)  # the bucket is the socket tests' business
    nameless = (
        b"",
        b"\x30\x03\x02\x01\x01",
        worker_der[: len(worker_der) // 2],
        ca_der,
        server_der,
    )
    try:
        yield Head(app, shared, original, applier, ledger, worker_der, serial, nameless)
    finally:
        ledger.close()


# --- bodies --------------------------------------------------------------------------------


def valid_enrollment(token: str, instance_id: int) -> dict[str, Any]:
    return {
        "protocol": 1,
        "token": token,
        "instance_id": instance_id,
        "boot_id": "c0ffee00",
        "public_ip": "203.0.113.200",
        "ports": {"7000": 40000, "7001": 40001},
        "machine": {"cpus": 2, "cpu_source": "cgroup", "gpus": 0},
        "agent_sha256": "0" * 64,
    }


def valid_report(token: str, instance_id: int) -> dict[str, Any]:
    return {
        "protocol": 1,
        "token": token,
        "instance_id": instance_id,
        "boot_id": "c0ffee00",
        "record_id": "i7",
        "phase": "worker",
        "reason": "signal",
        "detail": "SIGTERM to PID 1",
        "at": NOW,
    }


def valid_heartbeat(instance_id: int = 700, record_id: str = "i7") -> dict[str, Any]:
    return {
        "protocol": 1,
        "instance_id": instance_id,
        "record_id": record_id,
        "boot_id": BOOT,
        "seq": 3,
        "sent_at": NOW,
        "ray": {"state": "running", "pid": 4242, "exit_code": None, "uptime_seconds": 9.5},
        "processes": {"pids": 12, "pids_limit": 4096, "ray_processes": 5},
        "worker_ports": {"in_use": [40002], "total": 16},
        "utilisation": {
            "sample_seconds": 30.0,
            "cpu_fraction": 0.5,
            "load1": 0.1,
            "memory_used_fraction": 0.2,
            "net_rx_bytes": 10,
            "net_tx_bytes": 10,
            "gpu_fraction": None,
        },
    }


# made-up tokens, and the candidate's real one (which names only instance 701: never that one)
TOKENS = st.one_of(
    st.text(min_size=16, max_size=64),
    st.sampled_from([CANDIDATE_TOKEN, "not-a-token-this-head-issued"]),
)
INSTANCE_IDS = st.one_of(st.sampled_from([700, 701, 702, 703, 1, 99_999]), st.integers(1, 2**63))
HUGE = [
    *(0, -1, 2**31, 2**63 - 1, 2**63, 2**64 + 1, 10**100, 10**300, -(10**300), 10**400),
    *(700.0, 1e308, -1e308, 5e-324, 0.5, math.nan, math.inf, -math.inf),
]
SURROGATES = st.text(st.characters(categories=["Cs"]), min_size=1, max_size=20)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from(HUGE),
    st.floats(),  # NaN and the infinities too
    st.text(max_size=40),
    st.text(min_size=200, max_size=5000),  # past every maxLength
    SURROGATES,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def key_paths(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for key, value in doc.items():
        found.append((*prefix, key))
        if isinstance(value, dict):
            found.extend(key_paths(value, (*prefix, key)))
    return found


@st.composite
def mutations(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    """`valid` with one to four fields replaced (wrong types, huge numbers, unicode), removed or
    added."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 4))):
        paths = key_paths(doc)
        op = draw(st.sampled_from(["replace", "delete", "extra", "huge", "unicode"]))
        if not paths:
            op = "extra"
        path = draw(st.sampled_from(paths)) if paths else ()
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        if op == "delete":
            del parent[path[-1]]
        elif op == "extra":
            target = parent if isinstance(parent, dict) else doc
            target[draw(st.text(max_size=12))] = draw(JSON_VALUES)
        elif op == "huge":
            parent[path[-1]] = draw(st.sampled_from(HUGE))
        elif op == "unicode":
            text = st.one_of(st.text(min_size=1, max_size=300), SURROGATES)
            parent[path[-1]] = draw(text) + draw(st.sampled_from(["", "\ud800", "\udcff"]))
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return doc


def encoded(draw: st.DrawFn, doc: Any) -> bytes:
    """`doc` as JSON; lone surrogates as \\u escapes or as raw (CESU-8) bytes, both of which
    Python's json reads back as surrogates."""
    if draw(st.booleans()):
        return json.dumps(doc).encode()
    return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")


# bodies json.loads itself cannot read (each fits in the 64 KiB limit)
UNREADABLE = [
    b'{"protocol": ' + b"7" * 4_301 + b"}",  # past Python's int conversion limit
    b"[" * 60_000,  # past the recursion limit
    b'{"a": ' * 30_000 + b"1" + b"}" * 30_000,
    b'{"protocol": NaN}',
    b'{"protocol": -Infinity}',
]


@st.composite
def bodies(draw: st.DrawFn, valid: st.SearchStrategy[dict[str, Any]]) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "keys", "mutated", "valid"]))
    event(f"body: {kind}")
    if kind == "bytes":
        return draw(st.one_of(st.binary(max_size=2048), st.sampled_from(UNREADABLE)))
    if kind == "json":
        return encoded(draw, draw(JSON_VALUES))
    if kind == "keys":  # the schema's own field names with arbitrary values
        names = list(draw(valid))
        return encoded(draw, draw(st.dictionaries(st.sampled_from(names), JSON_VALUES)))
    if kind == "mutated":
        return encoded(draw, draw(mutations(draw(valid))))
    return encoded(draw, draw(valid))


REASONS = messages.schema(messages.REPORT)["properties"]["reason"]["enum"]
HEX = st.text("0123456789abcdef", min_size=8, max_size=64)


@st.composite
def varied_enrollments(draw: st.DrawFn) -> dict[str, Any]:
    """Enrollments the schema takes, with odd values wherever it allows them."""
    doc = valid_enrollment(draw(TOKENS), draw(INSTANCE_IDS))
    doc["boot_id"] = draw(HEX)
    doc["public_ip"] = draw(st.one_of(st.none(), st.text(max_size=64)))
    doc["ports"] = draw(
        st.dictionaries(st.integers(0, 99_999).map(str), st.integers(1, 65535), max_size=8)
    )
    machine = {"cpus": draw(st.integers(1, 2**80)), "gpus": draw(st.integers(0, 2**80))}
    if draw(st.booleans()):
        machine["cpu_source"] = draw(st.text(max_size=200))
    doc["machine"] = machine
    return doc


@st.composite
def varied_reports(draw: st.DrawFn) -> dict[str, Any]:
    """Reports the schema takes, with odd values wherever it allows them."""
    doc = valid_report(draw(st.one_of(TOKENS, st.text(min_size=1, max_size=256))), 1)
    doc["instance_id"] = draw(INSTANCE_IDS)
    doc["boot_id"] = draw(HEX)
    doc["record_id"] = draw(st.one_of(st.none(), st.sampled_from(["i7", "i8", "i9"]), st.text()))
    doc["phase"] = draw(st.sampled_from(["bootloader", "candidate", "worker"]))
    doc["reason"] = draw(st.sampled_from(REASONS))
    doc["detail"] = draw(st.text(max_size=4000))
    doc["at"] = draw(st.one_of(st.floats(-1e308, 1e308), st.integers(-(10**300), 10**300)))
    return doc


ENROLLMENTS = st.one_of(st.builds(valid_enrollment, TOKENS, INSTANCE_IDS), varied_enrollments())
REPORTS = st.one_of(st.builds(valid_report, TOKENS, INSTANCE_IDS), varied_reports())
HEARTBEATS = st.builds(
    valid_heartbeat,
    st.sampled_from([700, 701, 702, 703, 99_999]),
    st.sampled_from(["i7", "i8", "i9", "i10", "i99"]),
)
FRACTIONS = st.one_of(st.none(), st.floats(0, 1))


@st.composite
def own_heartbeats(draw: st.DrawFn) -> dict[str, Any]:
    """Valid heartbeats of the worker whose certificate the fuzz holds, with varied values."""
    doc = valid_heartbeat()
    doc["seq"] = draw(st.integers(1, 2**63 - 1))
    doc["sent_at"] = draw(st.floats(-1e300, 1e300))
    doc["ray"] = {
        "state": draw(st.sampled_from(["starting", "running", "exited"])),
        "pid": draw(st.one_of(st.none(), st.integers(-(2**63) + 1, 2**63 - 1))),
        "exit_code": draw(st.one_of(st.none(), st.integers(-255, 255))),
        "uptime_seconds": draw(st.one_of(st.none(), st.floats(0, 1e12))),
    }
    doc["worker_ports"] = {
        "in_use": draw(st.lists(st.integers(1, 65535), unique=True, max_size=20)),
        "total": draw(st.integers(0, 2**31)),
    }
    doc["utilisation"] = {
        "sample_seconds": draw(st.one_of(st.none(), st.floats(0, 1e9))),
        "cpu_fraction": draw(FRACTIONS),
        "load1": draw(st.one_of(st.none(), st.floats(0, 1e6))),
        "memory_used_fraction": draw(FRACTIONS),
        "net_rx_bytes": draw(st.one_of(st.none(), st.integers(0, 2**63 - 1))),
        "net_tx_bytes": draw(st.one_of(st.none(), st.integers(0, 2**63 - 1))),
        "gpu_fraction": draw(FRACTIONS),
    }
    return doc


# --- the property ------------------------------------------------------------------------------


def proven(schema: str, body: bytes) -> bool:
    """A body that holds a real proof (the candidate's token, naming its own instance)."""
    try:
        doc = messages.parse(schema, body)
    except messages.BadMessage:
        return False
    return (
        isinstance(doc, dict)
        and doc.get("token") == CANDIDATE_TOKEN
        and doc.get("instance_id") == 701
    )


def answer_is_a_refusal(answer: Answer) -> None:
    assert 400 <= answer.status < 500, (answer.status, answer.body[:300])
    doc = answer.json()
    messages.validator(messages.ERROR).validate(doc)


def only_alerts_changed(head: Head, before: Records, after: Records | None = None) -> None:
    """The records are `before` but for alerts an unproven refusal may add; nothing destroyed."""
    after = after if after is not None else head.shared.records()
    assert replace(after, alerts=before.alerts) == before
    added = after.alerts[len(before.alerts) :]
    assert after.alerts[: len(before.alerts)] == before.alerts
    assert all(a.record is None and a.at == NOW for a in added), added
    assert all(a.cls in ALERTING_UNPROVEN for a in added), added
    assert len({a.cls for a in added}) == len(added), added  # once a minute per class
    assert head.applier.asked == []


def ledger_lines(head: Head) -> int:
    return sum(1 for _ in read_ledger(head.ledger.path))


# --- the fuzz ---------------------------------------------------------------------------------


def test_the_valid_bodies_are_valid(head: Head):
    """The seeds of the mutations pass the schemas, so the fuzz reaches the decisions."""
    messages.parse(messages.ENROLL_REQUEST, json.dumps(valid_enrollment("x" * 16, 1)).encode())
    messages.parse(messages.REPORT, json.dumps(valid_report("x", 1)).encode())
    messages.parse(messages.HEARTBEAT, json.dumps(valid_heartbeat()).encode())
    assert head.app.heartbeat(head.worker_der, json.dumps(valid_heartbeat()).encode()).status == 200


def test_enroll_refuses_anything_a_stranger_sends(head: Head):
    seen: Counter[tuple[int, str]] = Counter()

    @FUZZ
    @given(body=bodies(ENROLLMENTS), peer=st.sampled_from(PEERS))
    def run(body: bytes, peer: str | None) -> None:
        assume(not proven(messages.ENROLL_REQUEST, body))
        before = head.reset()
        answer = head.app.enroll(body, peer=peer)
        answer_is_a_refusal(answer)
        only_alerts_changed(head, before)
        seen[(answer.status, answer.json()["error"])] += 1

    run()
    # the fuzz got past the schema to the token check, not only to 400
    assert seen[(400, "bad_request")] and seen[(403, "token_check_failed")], seen


def test_report_refuses_anything_a_stranger_sends(head: Head):
    seen: Counter[tuple[int, str]] = Counter()

    @FUZZ
    @given(body=bodies(REPORTS), peer=st.sampled_from(PEERS))
    def run(body: bytes, peer: str | None) -> None:
        assume(not proven(messages.REPORT, body))
        before = head.reset()
        lines = ledger_lines(head)
        answer = head.app.report(body, peer=peer)
        answer_is_a_refusal(answer)
        only_alerts_changed(head, before)
        assert ledger_lines(head) == lines + 1  # each one kept (the tally notes every one here)
        seen[(answer.status, answer.json()["error"])] += 1

    run()
    assert seen[(400, "bad_request")] and seen[(403, "token_check_failed")], seen


def test_heartbeat_without_a_worker_certificate_refuses_anything(head: Head):
    seen: Counter[tuple[int, str]] = Counter()

    @FUZZ
    @given(
        body=bodies(HEARTBEATS),
        cert=st.sampled_from([None, *head.nameless_ders]),
        peer=st.sampled_from(PEERS),
    )
    def run(body: bytes, cert: bytes | None, peer: str | None) -> None:
        before = head.reset()
        answer = head.app.heartbeat(cert, body, peer=peer)
        answer_is_a_refusal(answer)
        only_alerts_changed(head, before)
        seen[(answer.status, answer.json()["error"])] += 1

    run()
    assert seen[(400, "bad_request")] and seen[(403, "unknown_worker")], seen


def test_heartbeat_with_a_workers_certificate_changes_only_that_worker(head: Head):
    """The holder proved who it is: its own valid heartbeat is taken; anything else is refused,
    and a valid one that speaks for another instance revokes its certificate (heartbeats.py)."""
    seen: Counter[tuple[int, str]] = Counter()

    @FUZZ
    @given(body=bodies(st.one_of(own_heartbeats(), HEARTBEATS)), peer=st.sampled_from(PEERS))
    def run(body: bytes, peer: str | None) -> None:
        before = head.reset()
        answer = head.app.heartbeat(head.worker_der, body, peer=peer)
        after = head.shared.records()
        assert head.applier.asked == []
        assert answer.status == 200 or 400 <= answer.status < 500, answer.body[:300]
        seen[(answer.status, answer.json().get("error", ""))] += 1
        if answer.status == 200:
            doc = json.loads(body)
            assert (doc["instance_id"], doc["record_id"]) == (700, "i7")
            worker = after.instances["i7"]
            assert worker.self_report_at == NOW and worker.sample_at == NOW
            moved = replace(
                before.instances["i7"],
                self_report_at=NOW,
                sample_at=NOW,
                sample_busy=worker.sample_busy,
            )
            assert after.instances == {**before.instances, "i7": moved}
            assert replace(after, instances=before.instances) == before
            return
        answer_is_a_refusal(answer)
        if answer.json()["error"] == "unknown_worker":  # spoke for another instance
            doc = json.loads(body)
            assert (doc["instance_id"], doc["record_id"]) != (700, "i7")
            assert after.revoked_certs == (*before.revoked_certs, head.worker_serial)
            after = replace(after, revoked_certs=before.revoked_certs)
        only_alerts_changed(head, before, after)

    run()
    assert seen[(200, "")] and seen[(400, "bad_request")] and seen[(403, "unknown_worker")], seen


# --- what once raised in the head, each alone ---------------------------------------------


def _enrollment(**changes: Any) -> bytes:
    return json.dumps({**valid_enrollment("not-a-token-this-head-issued", 700), **changes}).encode()


def _report(token: str = "not-a-token-this-head-issued", **changes: Any) -> bytes:
    return json.dumps({**valid_report(token, 700), **changes}).encode()


def _heartbeat(**changes: Any) -> bytes:
    return json.dumps({**valid_heartbeat(), **changes}).encode()


@pytest.mark.parametrize("body", UNREADABLE, ids=["digits", "depth", "depth-objects", "nan", "inf"])
def test_bodies_json_loads_cannot_read_are_a_400(head: Head, body: bytes):
    """json.loads raises ValueError past 4300 digits and RecursionError past the recursion
    limit, and reads NaN and the infinities, which are not JSON: all a 400, on every endpoint."""
    before = head.reset()
    for answer in (
        head.app.enroll(body, peer=PEERS[0]),
        head.app.report(body, peer=PEERS[0]),
        head.app.heartbeat(None, body, peer=PEERS[0]),
        head.app.heartbeat(head.worker_der, body, peer=PEERS[0]),
    ):
        assert (answer.status, answer.json()["error"]) == (400, "bad_request")
    only_alerts_changed(head, before)


@pytest.mark.parametrize("raw", [False, True], ids=["escaped", "raw-bytes"])
@pytest.mark.parametrize("endpoint", ["enroll", "report"])
def test_a_lone_surrogate_in_a_forged_token_is_refused(head: Head, endpoint: str, raw: bool):
    """A token of lone surrogates (valid JSON as escapes; Python's json also reads them raw)
    cannot be hashed as UTF-8: refused, never raised."""
    before = head.reset()
    body = (
        valid_enrollment("\ud800" * 16, 700)
        if endpoint == "enroll"
        else valid_report("\udc80", 700)
    )
    data = (
        json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if raw
        else json.dumps(body).encode()
    )
    call = head.app.enroll if endpoint == "enroll" else head.app.report
    answer_is_a_refusal(call(data, peer=PEERS[0]))
    only_alerts_changed(head, before)


def test_a_workers_report_with_a_lone_surrogate_in_its_detail_is_kept(head: Head):
    """The candidate's own report (its real token, its own instance) quoting output with a
    surrogate-escaped byte (what os errors give for an undecodable file name) is the only record
    of why it ended: taken and ledgered, the record ended, not refused and not a 500."""
    head.reset()
    detail = "bootstrap failed: [Errno 2] no such file: '/data/\udcff'"
    body = _report(token=CANDIDATE_TOKEN, instance_id=701, record_id="i8", detail=detail)
    answer = head.app.report(body, peer=PEERS[0])
    assert answer.status == 200, answer.body
    [kept] = [e for e in read_ledger(head.ledger.path) if e.class_ == "worker_report"]
    assert kept.record == "i8" and kept.data["trusted"] is True
    assert "bootstrap failed" in kept.message and "/data/" in kept.message
    assert head.shared.records().instances["i8"].intent is Intent.DESTROYED


@pytest.mark.parametrize(
    ("endpoint", "value"),
    [
        ("report", "NaN"),
        ("report", "Infinity"),
        ("report", "1e400"),  # a float literal past range: inf
        ("report", "1" + "0" * 400),  # an integer past float range
        ("heartbeat", "1" + "0" * 400),
        ("heartbeat", "-1e400"),
    ],
    ids=["report-nan", "report-inf", "report-1e400", "report-10e400", "beat-10e400", "beat-1e400"],
)
def test_a_message_time_past_what_a_float_holds_is_a_400(head: Head, endpoint: str, value: str):
    """A report's `at` and a heartbeat's `sent_at` are unbounded JSON Schema numbers: a
    non-finite one would reach the ledger (which refuses it), an integer past float range
    `float()` (OverflowError). The heartbeat comes with the worker's real certificate."""
    before = head.reset()
    if endpoint == "report":
        body = _report(at=0.5).replace(b'"at": 0.5', b'"at": ' + value.encode())
        answer = head.app.report(body, peer=PEERS[0])
    else:
        body = _heartbeat(sent_at=0.5).replace(b'"sent_at": 0.5', b'"sent_at": ' + value.encode())
        answer = head.app.heartbeat(head.worker_der, body, peer=PEERS[0])
    assert value.encode() in body
    assert (answer.status, answer.json()["error"]) == (400, "bad_request")
    only_alerts_changed(head, before)


@pytest.mark.parametrize("endpoint", ["enroll", "report", "heartbeat"])
def test_an_integral_float_instance_id_is_refused(head: Head, endpoint: str):
    """1234.0 is an integer to JSON Schema but a float to the records and the ledger (which
    refuses a float `instance`): refused, never raised, never stored."""
    before = head.reset()
    if endpoint == "enroll":
        answer = head.app.enroll(_enrollment(instance_id=700.0), peer=PEERS[0])
    elif endpoint == "report":
        answer = head.app.report(_report(instance_id=700.0), peer=PEERS[0])
    else:
        answer = head.app.heartbeat(None, _heartbeat(instance_id=700.0), peer=PEERS[0])
    answer_is_a_refusal(answer)
    only_alerts_changed(head, before)


def test_a_real_candidate_enrolling_with_an_integral_float_id_stores_no_float(head: Head):
    """Its real token and its own instance, but as 701.0: either refused, or admitted with the
    vast id as an int (a float vast id would not survive the state file's checks)."""
    head.reset()
    answer = head.app.enroll(
        json.dumps(valid_enrollment(CANDIDATE_TOKEN, 701) | {"instance_id": 701.0}).encode(),
        peer=PEERS[0],
    )
    vast_id = head.shared.records().instances["i8"].vast_id
    assert answer.status == 200 or 400 <= answer.status < 500
    assert type(vast_id) is int
