"""The head's detections go through the one routing table: the classes that alert a human become
alerts in the records (for `status` and the metrics) and WARNING lines in the head's log, in the
same locked change as the decision, and the same alert is not added again within a minute.

In-process (`HeadApp` takes bytes and answers), so no socket is opened.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler import settings
from reconciler.applying.applier import Applier
from reconciler.applying.books import HostBooks
from reconciler.clock import FakeClock
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints
from reconciler.head.app import HeadApp
from reconciler.head.decisions import Decision, Note
from reconciler.head.pki import ClusterPki, pki_dir
from reconciler.head.shared import SharedRecords
from reconciler.model.records import Alert, InstanceRecord, Intent, Phase, Records, Role
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.watch import logs as watch_logs

from .harness import LINEAGE, cluster_spec, hc_record

SPEC = cluster_spec()
NOW = 1_800_000_000.0


@dataclass
class Ledger:
    lines: list[tuple[LedgerKind, str, str | None]] = field(default_factory=list)

    def append(self, event: LedgerEvent) -> None:
        self.lines.append((event.kind, event.class_, event.record))


@dataclass
class Provider:
    destroyed: list[int] = field(default_factory=list)

    def destroy_instance(self, instance_id: int) -> bool:
        self.destroyed.append(instance_id)
        return True


@dataclass
class Head:
    app: HeadApp
    shared: SharedRecords
    clock: FakeClock
    ledger: Ledger
    provider: Provider
    saved: list[Records]

    def alerts(self) -> tuple[Alert, ...]:
        return self.shared.records().alerts


def worker(ident: str, vast_id: int) -> InstanceRecord:
    return hc_record(
        ident,
        created_at=NOW - 600,
        role=Role.WORKER,
        phase=Phase.SERVING,
        vast_id=vast_id,
        listed_ip=f"203.0.113.{vast_id % 250}",  # vast's latest listing
    )


OWN_ADDRESS = "203.0.113.200"  # instance 700's address in vast's listing


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    clock = FakeClock(NOW)
    saved: list[Records] = []
    records = Records(instances={"i7": worker("i7", 700)})
    shared = SharedRecords(records, save=saved.append)
    ledger = Ledger()
    provider = Provider()
    applier = Applier(provider=provider, books=HostBooks(shared, ledger, LINEAGE), now=clock.now)
    app = HeadApp(
        spec=SPEC,
        cluster_pki=ClusterPki.load_or_create(
            pki_dir(tmp_path, "hc"), "hc", "127.0.0.1", now=clock.now()
        ),
        host=shared,
        ledger=ledger,
        applier=applier,
        lineage=LINEAGE,
        clock=clock,
        endpoints=HeadEndpoints("127.0.0.1", 6390, 18443, 18444),
        agent=AgentBundle(b"", "0" * 64, ""),
    )
    try:
        yield Head(app, shared, clock, ledger, provider, saved)
    finally:
        applier.stop()


def enroll_body(instance_id: int, token: str = "not-a-token-this-head-issued") -> bytes:
    return json.dumps(
        {
            "protocol": 1,
            "token": token,
            "instance_id": instance_id,
            "boot_id": "b0b0b0b0",
            "public_ip": "127.0.0.1",
            "ports": {},
            "machine": {"cpus": 2, "gpus": 0},
        }
    ).encode()


def test_a_bad_token_from_a_stranger_raises_an_alert_in_the_records_and_the_log(
    head: Head, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="reconciler.head"):
        answer = head.app.enroll(enroll_body(999))
    assert (answer.status, answer.json()["error"]) == (403, "token_check_failed")
    [alert] = head.alerts()
    assert (alert.at, alert.cluster, alert.cls, alert.record) == (
        NOW,
        "hc",
        "token_check_failed",
        None,
    )
    assert "instance 999" in alert.message
    # saved with the decision: the last save holds the alert
    assert head.saved and head.saved[-1].alerts == (alert,)
    # the detection is still in the ledger, as before
    assert (LedgerKind.DETECTION, "token_check_failed", None) in head.ledger.lines
    warnings = [r for r in caplog.records if r.name == "reconciler.head"]
    assert [r.levelno for r in warnings] == [logging.WARNING]
    assert "ALERT token_check_failed" in warnings[0].getMessage()
    assert "instance 999" in warnings[0].getMessage()


def test_a_bad_token_from_our_own_instance_alerts_on_its_record_and_destroys_it(head: Head):
    answer = head.app.enroll(enroll_body(700), peer=OWN_ADDRESS)  # provably from instance 700
    assert answer.status == 403
    [alert] = head.alerts()
    assert (alert.cls, alert.record) == ("token_check_failed", "i7")
    # the alert and the intent to destroy are one change of the records
    assert head.saved[0].alerts == (alert,)
    assert head.saved[0].instances["i7"].intent is Intent.DESTROYED
    assert head.app.applier.drain(10)
    assert head.provider.destroyed == [700]
    assert head.shared.records().alerts == (alert,)  # the applier's save keeps it


def test_a_bad_token_from_a_strangers_address_changes_nothing(head: Head):
    """Issue 13: one forged enrollment naming a worker's instance id destroyed that worker."""
    answer = head.app.enroll(enroll_body(700), peer="198.51.100.66")
    assert answer.status == 403
    assert head.saved == [] or all(r.instances["i7"].intent is Intent.RUNNING for r in head.saved)
    assert head.app.applier.drain(10) and head.provider.destroyed == []
    assert head.shared.records().instances["i7"].intent is Intent.RUNNING


def test_the_same_junk_message_within_the_window_is_counted_not_added_again(head: Head):
    first = head.app.enroll(b"{not json")
    assert first.status == 400
    head.clock.advance(30)
    assert head.app.enroll(b"[]").status == 400
    assert head.app.heartbeat(None, b"junk").status == 400
    [alert] = head.alerts()
    assert (alert.cls, alert.at, alert.record) == ("bad_agent_message", NOW, None)
    # unproven traffic is noted in aggregate: one ledger line a minute per source and class
    assert [c for _, c, _ in head.ledger.lines].count("bad_agent_message") == 1
    # a minute after the first one, the next ledger line carries the count; the alert is the
    # one window's (planning/alerts.py, as every other alert): counted, not added again
    head.clock.advance(31)
    assert head.app.enroll(b"{}").status == 400
    assert [a.at for a in head.alerts()] == [NOW]
    assert [c for _, c, _ in head.ledger.lines].count("bad_agent_message") == 2
    assert head.app.unproven.totals() == {("in-process", "bad_agent_message"): 4}
    assert head.app.alert_repeats() == {("hc", "bad_agent_message"): 1}
    # after the window, the same junk alerts again
    head.clock.advance(settings.ALERT_REPEAT_SECONDS)
    assert head.app.enroll(b"{}").status == 400
    assert [a.at for a in head.alerts()] == [NOW, NOW + 61 + settings.ALERT_REPEAT_SECONDS]


def test_alerts_of_other_records_or_classes_are_not_taken_for_repeats(head: Head):
    head.app.enroll(enroll_body(999))  # a stranger: no record
    head.app.enroll(enroll_body(700), peer=OWN_ADDRESS)  # our i7, from its own address
    head.app.enroll(b"{}")  # junk
    keys = [(a.cls, a.record) for a in head.alerts()]
    assert keys == [
        ("token_check_failed", None),
        ("token_check_failed", "i7"),
        ("bad_agent_message", None),
    ]
    assert head.app.alert_repeats() == {}


def test_a_class_the_routing_table_does_not_know_alerts_a_human(head: Head):
    note = Note(LedgerKind.DETECTION, "never_heard_of_it", "something odd", record="i7")

    def decide(records: Records, now: float) -> Decision[None]:
        return Decision(records, (note,))

    head.app._decide(decide)
    [alert] = head.alerts()
    assert (alert.cls, alert.record, alert.message) == ("never_heard_of_it", "i7", "something odd")


def test_detections_that_route_to_nothing_and_non_detections_raise_no_alert(head: Head):
    notes = (
        # a refused heartbeat is refused, and that is the whole action
        Note(LedgerKind.DETECTION, "heartbeat_refused", "refused", record="i7"),
        # a decision of an alerting class is not a detection
        Note(LedgerKind.DECISION, "token_check_failed", "destroy", record="i7"),
    )

    def decide(records: Records, now: float) -> Decision[None]:
        return Decision(records, notes)

    head.app._decide(decide)
    head.app.refused_handshake("heartbeat", "198.51.100.9", "no certificate")
    assert head.alerts() == ()
    assert head.saved == []  # nothing changed, nothing saved
    assert [c for _, c, _ in head.ledger.lines] == [
        "heartbeat_refused",
        "token_check_failed",
        "heartbeat_refused",
    ]


def test_watch_logs_carry_the_heads_alerts_in_their_format_and_redacted(head: Head):
    stream = io.StringIO()
    secret = "acct-key-in-a-message-0f3c"
    watch_logs.configure("json", stream, [secret])
    try:
        head.app.enroll(enroll_body(999))
        junk = json.loads(enroll_body(999))
        head.app.enroll(json.dumps({**junk, "boot_id": secret}).encode())  # said in the error
    finally:
        for name in (watch_logs.LOGGER, watch_logs.LIBRARY_LOGGER):
            logging.getLogger(name).handlers.clear()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert {x["logger"] for x in lines} == {"reconciler.head"}
    assert {x["level"] for x in lines} == {"info", "warning"}  # its detections, its alerts
    warnings = [x for x in lines if x["level"] == "warning"]
    assert [(x["level"], x["logger"], x["cls"], x["cluster"]) for x in warnings] == [
        ("warning", "reconciler.head", "token_check_failed", "hc"),
        ("warning", "reconciler.head", "bad_agent_message", "hc"),
    ]
    assert secret in head.alerts()[1].message  # the message names the bad value...
    assert secret not in stream.getvalue()  # ...which the log redacts
