"""The head's two decisions of a deliberate stop (DESIGN.md 10), as tables, and the resume over
port B with a real certificate.

    the answer to a report   `reports.report`: "deliberate stop" only for the TERM of a worker
                             whose intent the head set to stopped; every other report ends the
                             record, as before
    a resume                 `enrollment.resume`: let in only for the worker whose stop the head
                             answered as deliberate and whose intent it set back to running,
                             with the certificate its enrollment issued; every other restart is
                             refused (the agent reports and destroys itself)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from reconciler.head import enrollment, messages, reports, tokens
from reconciler.head.messages import Report, ResumeRequest
from reconciler.head.pki import WorkerIdentity
from reconciler.model.records import InstanceRecord, Intent, JoinToken, Phase, Records, Role
from reconciler.model.routing import route

from .harness import LINEAGE, HeadWorld, client_pair, hc_record, head_world
from .schemas import assert_valid

NOW = 1_800_000_000.0
TOKEN = "join-token-of-i7-0123456789abcdef"
SERIAL = 0xC0FFEE
VAST_ID = 4242


def worker(**changes: Any) -> InstanceRecord:
    base = hc_record(
        "i7",
        created_at=NOW - 3600,
        role=Role.WORKER,
        phase=Phase.STOPPING,
        intent=Intent.STOPPED,
        vast_id=VAST_ID,
        slot_id="q1s1",
        request_id="q1",
        enrolled_at=NOW - 3000,
        self_report_at=NOW - 30,
        cert_serial=SERIAL,
    )
    return replace(base, **changes)


def records_of(record: InstanceRecord, **more: Any) -> Records:
    token = JoinToken(
        tokens.digest(TOKEN), record.id, "hc", NOW - 3600, NOW - 3000, NOW - 3000, "b0b0b0b0"
    )
    return Records(instances={record.id: record}, tokens={token.token_hash: token}, **more)


def report(reason: str = "signal", phase: str = "worker", token: str = TOKEN) -> Report:
    return Report(token, VAST_ID, "b0b0b0b0", "i7", phase, reason, "SIGTERM to PID 1", NOW)


# --- the answer to a report --------------------------------------------------------------------


@dataclass(frozen=True)
class ReportCase:
    record: InstanceRecord
    message: Report
    deliberate: bool


REPORTS = {
    "the money chain's stop: TERM to a worker whose intent is stopped": ReportCase(
        worker(), report(), True
    ),
    "after vast confirmed the stop already": ReportCase(
        worker(phase=Phase.STOPPED), report(), True
    ),
    "vast's own stop (outbid, reboot): intent still running": ReportCase(
        worker(intent=Intent.RUNNING, phase=Phase.SERVING), report(), False
    ),
    "intent stopped, but Ray exited": ReportCase(worker(), report("ray_exited"), False),
    "intent stopped, but no heartbeat success": ReportCase(
        worker(), report("no_heartbeat_success"), False
    ),
    "intent stopped, but a candidate reports": ReportCase(
        worker(role=Role.CANDIDATE, slot_id=None), report(phase="candidate"), False
    ),
    "a worker that says it is a candidate": ReportCase(worker(), report(phase="candidate"), False),
    "a restart the head refused the resume of": ReportCase(
        worker(), report("resume_refused"), False
    ),
}


@pytest.mark.parametrize("case", list(REPORTS))
def test_the_answer_to_a_report(case: str) -> None:
    given = REPORTS[case]
    before = records_of(given.record)
    decision = reports.report(before, given.message, cluster="hc", lineage=LINEAGE, now=NOW)
    assert decision.refusal is None and decision.destroys == ()
    assert decision.outcome is given.deliberate
    after = decision.records.instances["i7"]
    [note] = decision.notes
    if given.deliberate:
        # the record keeps its intent and says the worker may resume once started again
        assert after.intent is Intent.STOPPED and after.phase is given.record.phase
        assert after.stopped_deliberately_at == NOW
        assert note.cls == "deliberate_stop" and note.data["deliberate_stop"] is True
        assert not route(note.cls).ends_machine
    else:
        assert after.intent is Intent.DESTROYED and after.phase is Phase.DESTROYING
        assert after.stopped_deliberately_at is None
        assert note.cls == "worker_report" and note.data["trusted"] is True


def test_an_untrusted_report_is_no_deliberate_stop() -> None:
    before = records_of(worker())
    decision = reports.report(
        before, report(token="not-the-token-of-i7"), cluster="hc", lineage=LINEAGE, now=NOW
    )
    assert decision.refusal is not None and decision.refusal.error == "token_check_failed"
    assert decision.records is before and not decision.outcome


# --- a resume ----------------------------------------------------------------------------------


def identity(**changes: Any) -> WorkerIdentity:
    return replace(WorkerIdentity("hc", "i7", VAST_ID, "q1s1", SERIAL), **changes)


def resume_request(**changes: Any) -> ResumeRequest:
    base = ResumeRequest(VAST_ID, "i7", "b1b1b1b1", "127.0.0.1", {70000: 40000}, 2, 0)
    return replace(base, **changes)


# started again by the head after its deliberate stop: the one record a resume is for
STARTED = worker(
    intent=Intent.RUNNING,
    phase=Phase.ENROLLED,
    stopped_deliberately_at=NOW - 900,
    start_requested_at=NOW - 20,
)


@dataclass(frozen=True)
class ResumeCase:
    record: InstanceRecord
    error: str | None  # None: let in
    identity: WorkerIdentity | None = field(default_factory=identity)
    request: ResumeRequest = field(default_factory=resume_request)
    records: Callable[[Records], Records] = lambda records: records


RESUMES = {
    "stopped deliberately, started again by the head": ResumeCase(STARTED, None),
    "while the start is still being listed (vast said loading)": ResumeCase(
        replace(STARTED, phase=Phase.PULLING), None
    ),
    "the same boot again (its answer was lost)": ResumeCase(
        replace(STARTED, stopped_deliberately_at=None, resumed_boot="b1b1b1b1"), None
    ),
    "not started again: its intent is still stopped": ResumeCase(
        replace(STARTED, intent=Intent.STOPPED, phase=Phase.STOPPED), "resume_refused"
    ),
    "a stop the head did not answer as deliberate": ResumeCase(
        replace(STARTED, stopped_deliberately_at=None), "resume_refused"
    ),
    "another boot after the resume (an unexpected restart)": ResumeCase(
        replace(STARTED, stopped_deliberately_at=None, resumed_boot="b0b0b0b0"), "resume_refused"
    ),
    "the same boot, but stopped again since": ResumeCase(
        replace(
            STARTED,
            intent=Intent.STOPPED,
            stopped_deliberately_at=None,
            resumed_boot="b1b1b1b1",
        ),
        "resume_refused",
    ),
    "a record that has ended": ResumeCase(
        replace(STARTED, intent=Intent.DESTROYED, phase=Phase.DESTROYING), "unknown_worker"
    ),
    "a record destroyed": ResumeCase(replace(STARTED, phase=Phase.DESTROYED), "unknown_worker"),
    "no certificate": ResumeCase(STARTED, "unknown_worker", identity=None),
    "a revoked certificate": ResumeCase(
        STARTED, "revoked", records=lambda r: replace(r, revoked_certs=(SERIAL,))
    ),
    "another certificate than its enrollment's": ResumeCase(
        STARTED, "unknown_worker", identity=identity(serial=SERIAL + 2)
    ),
    "a certificate of another cluster": ResumeCase(
        STARTED, "unknown_worker", identity=identity(cluster="other")
    ),
    "a certificate of another instance": ResumeCase(
        STARTED, "unknown_worker", identity=identity(instance_id=VAST_ID + 1)
    ),
    "a resume speaking for another instance": ResumeCase(
        STARTED, "unknown_worker", request=resume_request(instance_id=VAST_ID + 1)
    ),
    "a resume speaking for another record": ResumeCase(
        STARTED, "unknown_worker", request=resume_request(record_id="i8")
    ),
    "a record of another state": ResumeCase(
        replace(STARTED, managed_by="0e0e0e0e-1111-4222-8333-444455556666"), "unknown_worker"
    ),
    "a candidate's record": ResumeCase(replace(STARTED, role=Role.CANDIDATE), "unknown_worker"),
}


@pytest.mark.parametrize("case", list(RESUMES))
def test_a_resume(case: str) -> None:
    given = RESUMES[case]
    before = given.records(records_of(given.record))
    decision = enrollment.resume(
        before, given.identity, given.request, cluster="hc", lineage=LINEAGE, now=NOW
    )
    assert decision.destroys == ()
    if given.error is not None:
        assert decision.refusal is not None and decision.outcome is None
        assert (decision.refusal.status, decision.refusal.error) == (403, given.error)
        assert decision.records is before  # a refusal changes nothing; the agent reports
        [note] = decision.notes
        assert note.cls == "resume_refused" and route(note.cls).ends_machine
        return
    assert decision.refusal is None and decision.outcome is not None
    admission = decision.outcome
    assert (admission.slot_id, admission.request_id, admission.serial) == ("q1s1", "q1", SERIAL)
    after = decision.records.instances["i7"]
    assert admission.record == after
    assert after.phase is Phase.ENROLLED and after.intent is Intent.RUNNING
    assert after.self_report_at == NOW  # the went-silent clock starts again
    assert after.stopped_deliberately_at is None and after.start_requested_at is None
    assert after.resumed_boot == "b1b1b1b1" and after.cert_serial == SERIAL
    assert after.slot_id == "q1s1" and after.enrolled_at == STARTED.enrolled_at
    [note] = decision.notes
    assert note.cls == "resumed" and not route(note.cls).ends_machine


# --- over the network: port B, a real certificate --------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> Iterator[HeadWorld]:
    with head_world(tmp_path) as w:
        yield w


def resume_body(answer: dict[str, Any], *, boot_id: str = "b1b1b1b1") -> dict[str, Any]:
    first = answer["ray"]["node_manager_port"]  # as the enrollment said: p - 30000
    return {
        "protocol": 1,
        "instance_id": answer["instance_id"],
        "record_id": answer["record_id"],
        "boot_id": boot_id,
        "public_ip": "127.0.0.1",
        # a start may map the ports anew: the answer says them as they are now
        "ports": {str(70000 + i): first + 1000 + i for i in range(18)},
        "machine": {"cpus": 2, "cpu_source": "test", "gpus": 0},
    }


def test_a_worker_stopped_deliberately_resumes_over_port_b(world: HeadWorld) -> None:
    rented = world.rent(world.place(slots=1))
    enrolled = world.enroll(rented)
    assert enrolled.status == 200
    answer = enrolled.doc
    client = client_pair(answer)
    record_id = answer["record_id"]
    # the money chain's stop: intent stopped before the call, then the worker's TERM report
    world.change(
        lambda r: replace(
            r,
            instances={
                **r.instances,
                record_id: replace(
                    r.instances[record_id],
                    intent=Intent.STOPPED,
                    phase=Phase.STOPPING,
                    public_ip="127.0.0.1",
                ),
            },
        )
    )
    term = {
        "protocol": 1,
        "token": rented.token,
        "instance_id": rented.vast_id,
        "boot_id": "b0b0b0b0",
        "record_id": record_id,
        "phase": "worker",
        "reason": "signal",
        "detail": "SIGTERM to PID 1",
        "at": time.time(),
    }
    said = world.call("POST", "/report", term)
    assert said.status == 200 and said.doc == {"ok": True, "deliberate_stop": True}
    assert_valid(messages.REPORT, said.doc, "answer")
    body = resume_body(answer)
    assert_valid(messages.RESUME, body)
    # not started again yet: refused, and the record is left as it is
    early = world.call("POST", "/resume", body, port="heartbeat", client=client)
    assert (early.status, early.doc["error"]) == (403, "resume_refused")
    assert_valid(messages.ERROR, early.doc)
    # the planner's start: intent back to running before the call to vast
    world.change(
        lambda r: replace(
            r,
            instances={
                **r.instances,
                record_id: replace(
                    r.instances[record_id], intent=Intent.RUNNING, phase=Phase.PULLING
                ),
            },
        )
    )
    resumed = world.call("POST", "/resume", body, port="heartbeat", client=client)
    assert resumed.status == 200, resumed.doc
    assert_valid(messages.ENROLL_RESPONSE, resumed.doc)
    assert resumed.doc["resumed"] is True and "certificate" not in resumed.doc
    assert resumed.doc["slot_id"] == answer["slot_id"]
    ports = resumed.doc["ray"]
    assert ports["node_manager_port"] == answer["ray"]["node_manager_port"] + 1000
    record = world.record(record_id)
    assert record.phase is Phase.ENROLLED and record.resumed_boot == "b1b1b1b1"
    # the kept certificate goes on heartbeating
    beat = world.heartbeat(answer, client=client, boot_id="b1b1b1b1", state="running")
    assert beat.status == 200
    assert world.record(record_id).phase is Phase.SERVING
    # a lost answer is answered again; another boot is a restart, refused
    again = world.call("POST", "/resume", body, port="heartbeat", client=client)
    assert again.status == 200
    other = world.call(
        "POST", "/resume", resume_body(answer, boot_id="b2b2b2b2"), port="heartbeat", client=client
    )
    assert (other.status, other.doc["error"]) == (403, "resume_refused")
    assert [e.data["again"] for e in world.ledger("resumed")] == [False, True]


def test_a_resume_without_a_worker_certificate_is_refused(world: HeadWorld) -> None:
    rented = world.rent(world.place(slots=1))
    answer = world.enroll(rented).doc
    app = world.service.app
    refused = app.resume(None, json.dumps(resume_body(answer)).encode())
    assert (refused.status, refused.json()["error"]) == (403, "unknown_worker")
    malformed = app.resume(None, b'{"protocol": 1}')
    assert malformed.status == 400
