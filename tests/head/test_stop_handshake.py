"""The head's side of the money chain's stop handshake (DESIGN.md 11; `model.stopping`): what a
heartbeat answer says of a stop, and what a heartbeat's acknowledgment changes on the record.

    asked, not acknowledged     answer "pending"; an acknowledging beat sets `stop_acked_at`
                                and is ledgered as `stop_acknowledged`
    asked, acknowledged         answer "pending"; nothing changes
    vast's stop called          answer "pending" (until the TERM); a late acknowledgment
                                changes nothing (the stop went ahead without the drain)
    called off (cancelled)      answer "cancelled"; a beat without the acknowledgment closes it
    no stop                     no word
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pytest

from reconciler.head import heartbeats, messages
from reconciler.head.heartbeats import Taken
from reconciler.head.messages import Heartbeat
from reconciler.head.pki import WorkerIdentity
from reconciler.model import stopping
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role

from .harness import LINEAGE, HeadWorld, client_pair, hc_record, head_world, heartbeat_body
from .schemas import assert_valid

NOW = 1_800_000_000.0
VAST_ID = 4242
SERIAL = 0xC0FFEE
IDENTITY = WorkerIdentity("hc", "i7", VAST_ID, "q1s1", SERIAL)
CLOCKS = {"self_report_at", "sample_at", "sample_busy"}  # what a heartbeat may keep unwritten


def worker(**changes: Any) -> InstanceRecord:
    base = hc_record(
        "i7",
        created_at=NOW - 3600,
        role=Role.WORKER,
        phase=Phase.SERVING,
        intent=Intent.RUNNING,
        vast_id=VAST_ID,
        slot_id="q1s1",
        request_id="q1",
        enrolled_at=NOW - 3000,
        self_report_at=NOW - 30,
        cert_serial=SERIAL,
    )
    return replace(base, **changes)


ASKED = stopping.asked(worker(), NOW - 20)


def beat(ack: bool) -> Heartbeat:
    answer = {"instance_id": VAST_ID, "record_id": "i7", "ray": {"worker_ports": [1, 2]}}
    doc: dict[str, Any] = heartbeat_body(answer, seq=3)
    if ack:
        doc["stop"] = "acknowledged"
    assert_valid(messages.HEARTBEAT, doc)
    return Heartbeat.of(doc, received_at=NOW)


@dataclass(frozen=True)
class Case:
    record: InstanceRecord
    ack: bool
    word: str | None  # the answer's "stop"
    acked_at: float | None  # the record's stop_acked_at after the beat
    cancelled_at: float | None  # its stop_cancelled_at after the beat
    noted: bool = False  # a `stop_acknowledged` ledger note


CASES = {
    "no stop": Case(worker(), False, None, None, None),
    "no stop, a stray acknowledgment": Case(worker(), True, None, None, None),
    "asked: the first acknowledgment": Case(ASKED, True, "pending", NOW, None, noted=True),
    "asked: not heard yet": Case(ASKED, False, "pending", None, None),
    "acknowledged already": Case(
        replace(ASKED, stop_acked_at=NOW - 10), True, "pending", NOW - 10, None
    ),
    "vast's stop called (phase stopping)": Case(
        replace(ASKED, phase=Phase.STOPPING), True, "pending", None, None
    ),
    "called off, the agent still waits": Case(
        stopping.cancelled(replace(ASKED, stop_acked_at=NOW - 10), NOW - 5),
        True,
        "cancelled",
        None,
        NOW - 5,
    ),
    "called off, the agent no longer waits": Case(
        stopping.cancelled(ASKED, NOW - 5), False, "cancelled", None, None
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_a_heartbeat_answer_says_of_a_stop(case: str) -> None:
    given = CASES[case]
    records = Records(instances={"i7": given.record})
    decision = heartbeats.heartbeat(
        records, IDENTITY, beat(given.ack), cluster="hc", lineage=LINEAGE, now=NOW
    )
    assert decision.refusal is None and decision.destroys == ()
    assert isinstance(decision.outcome, Taken) and decision.outcome.stop == given.word
    after = decision.records.instances["i7"]
    assert (after.stop_acked_at, after.stop_cancelled_at) == (given.acked_at, given.cancelled_at)
    assert after.intent is given.record.intent and after.self_report_at == NOW
    noted = [n for n in decision.notes if n.cls == stopping.ACKED_CLASS]
    assert bool(noted) is given.noted
    # kept unwritten for seconds only when nothing but the worker's clocks moved
    moved = {
        f.name for f in fields(after) if getattr(after, f.name) != getattr(given.record, f.name)
    }
    assert decision.clocks_only is (moved <= CLOCKS and not decision.notes), moved


def test_a_heartbeat_that_makes_a_worker_serving_is_not_clocks_only() -> None:
    enrolled = replace(worker(), phase=Phase.ENROLLED, serving_at=None)
    records = Records(instances={"i7": enrolled})
    answer = {"instance_id": VAST_ID, "record_id": "i7", "ray": {"worker_ports": [1, 2]}}
    doc: dict[str, Any] = heartbeat_body(answer, seq=3, state="running")
    decision = heartbeats.heartbeat(
        records,
        IDENTITY,
        Heartbeat.of(doc, received_at=NOW),
        cluster="hc",
        lineage=LINEAGE,
        now=NOW,
    )
    assert decision.records.instances["i7"].phase is Phase.SERVING
    assert not decision.clocks_only


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        yield w


def test_the_handshake_over_the_heartbeat_port(world: HeadWorld) -> None:
    rented = world.rent(world.place(slots=1))
    answer = world.enroll(rented).doc
    client = client_pair(answer)
    record_id = answer["record_id"]
    first = world.heartbeat(answer, client=client)
    assert first.status == 200 and "stop" not in first.doc

    def ask(records: Records) -> Records:
        asked = stopping.asked(records.instances[record_id], time.time())
        return replace(records, instances={**records.instances, record_id: asked})

    world.change(ask)
    pending = world.heartbeat(answer, client=client, seq=2)
    assert pending.status == 200 and pending.doc["stop"] == "pending"
    assert_valid(messages.HEARTBEAT, pending.doc, "answer")
    assert world.record(record_id).stop_acked_at is None

    acked = world.call(
        "POST",
        "/heartbeat",
        {**heartbeat_body(answer, seq=3), "stop": "acknowledged"},
        port="heartbeat",
        client=client,
    )
    assert acked.status == 200 and acked.doc["stop"] == "pending"
    assert world.record(record_id).stop_acked_at is not None
    [note] = world.ledger(stopping.ACKED_CLASS)
    assert "acknowledged the stop" in note.message

    world.change(
        lambda r: replace(
            r,
            instances={
                **r.instances,
                record_id: stopping.cancelled(r.instances[record_id], time.time()),
            },
        )
    )
    told = world.call(
        "POST",
        "/heartbeat",
        {**heartbeat_body(answer, seq=4), "stop": "acknowledged"},
        port="heartbeat",
        client=client,
    )
    assert told.status == 200 and told.doc["stop"] == "cancelled"
    assert_valid(messages.HEARTBEAT, told.doc, "answer")
    assert world.record(record_id).intent is Intent.RUNNING
    # the agent heard it: its next beat does not acknowledge, which closes the cancel (that
    # answer still says it, for an agent that never heard "pending")
    closing = world.heartbeat(answer, client=client, seq=5)
    assert closing.status == 200 and closing.doc["stop"] == "cancelled"
    assert world.record(record_id).stop_cancelled_at is None
    after = world.heartbeat(answer, client=client, seq=6)
    assert after.status == 200 and "stop" not in after.doc
