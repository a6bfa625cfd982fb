"""The head's agent endpoints as an application: bytes in, an answer out, no sockets.

`HeadApp` is what the TLS servers of `service` call, and what a test or the watch controller can
call in-process. Each handler parses and validates the message against its schema, takes the
records lock, runs the pure decision, saves the records it returns, writes its notes to the ledger
(in order, under the same lock) and answers. The destroys a decision asks for are handed to the
`Destroyer`'s thread, so the agent is answered at once and the calls still go out at once.

Every detection the head notes goes through the one routing table (DESIGN.md rule 8), as the
nets' do: when its class alerts a human (a failed token check, a malformed agent message, a class
the table does not know), an `Alert` joins the records in the same locked change and is logged at
WARNING. The same alert (cluster, class, record) is kept once a minute at most; the repeats are
counted in memory (`alert_repeats`), so a stranger who keeps sending junk cannot fill the state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reconciler.clock import Clock
from reconciler.head import enrollment, heartbeats, messages, pki, reports
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan, enroll_answer
from reconciler.head.decisions import Decision, Note, Refusal
from reconciler.head.destroyer import Destroyer
from reconciler.head.shared import LedgerSink, RecordsHost
from reconciler.model.records import Alert, Records
from reconciler.model.routing import route
from reconciler.model.spec import ClusterSpec
from reconciler.state.ledger import LedgerKind

T = TypeVar("T")
log = logging.getLogger("reconciler.head")

# A handshake refused on a port is ledgered at most this often per peer address: a scanner on
# the internet must not fill the ledger.
HANDSHAKE_NOTE_INTERVAL = 60.0
# The same alert (cluster, class, record) joins the records at most this often; repeats are counted.
ALERT_REPEAT_SECONDS = 60.0


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


def json_answer(status: int, doc: Mapping[str, Any]) -> Answer:
    return Answer(status, json.dumps(doc, separators=(",", ":")).encode())


def refusal_answer(refusal: Refusal) -> Answer:
    return json_answer(refusal.status, {"error": refusal.error, "message": refusal.message})


class HeadApp:
    """Enrollment, heartbeats, reports and the agent download for one cluster."""

    def __init__(
        self,
        *,
        spec: ClusterSpec,
        cluster_pki: pki.ClusterPki,
        host: RecordsHost,
        ledger: LedgerSink,
        destroyer: Destroyer,
        lineage: str,
        clock: Clock,
        endpoints: HeadEndpoints,
        agent: AgentBundle,
        ports: PortPlan | None = None,
    ) -> None:
        self.spec = spec
        self.pki = cluster_pki
        self.host = host
        self.ledger = ledger
        self.destroyer = destroyer
        self.lineage = lineage
        self.clock = clock
        self.endpoints = endpoints
        self.agent = agent
        self.ports = ports or PortPlan()
        # The watch controller may hold enrollment (503, the candidate retries) while it catches up.
        self.accepting_enrollments = True
        self.handshake_note_interval = HANDSHAKE_NOTE_INTERVAL
        self._handshake_noted: dict[tuple[str, str], float] = {}
        self._guard = threading.Lock()
        self.alert_repeat_seconds = ALERT_REPEAT_SECONDS
        self._alert_repeats: dict[tuple[str, str], int] = {}

    @property
    def cluster(self) -> str:
        return self.spec.name

    def set_spec(self, spec: ClusterSpec) -> None:
        """A new version of the cluster spec (thresholds, node types) after a spec reload."""
        self.spec = spec

    # --- POST /enroll ----------------------------------------------------------------------

    def enroll(self, body: bytes) -> Answer:
        if not self.accepting_enrollments:
            return refusal_answer(Refusal(503, "not_ready", "the head is not enrolling yet"))
        parsed = self._parse(messages.ENROLL_REQUEST, body, "enroll")
        if isinstance(parsed, Answer):
            return parsed
        request = messages.EnrollRequest.of(parsed)
        if not request.public_ip:
            return refusal_answer(Refusal(400, "bad_request", "the container has no public IP"))
        serial = pki.new_serial()
        decision = self._decide(
            lambda records, now: enrollment.enroll(
                records, request, cluster=self.cluster, lineage=self.lineage, now=now, serial=serial
            )
        )
        if decision.refusal is not None or decision.outcome is None:
            return refusal_answer(decision.refusal or Refusal(500, "bad_request", "no decision"))
        admission = decision.outcome
        certificate = pki.issue_worker(
            self.pki.ca,
            cluster=self.cluster,
            record_id=admission.record.id,
            instance_id=request.instance_id,
            slot_id=admission.slot_id,
            serial=admission.serial,
            now=self.clock.now(),
        )
        answer = enroll_answer(
            admission,
            request,
            spec=self.spec,
            endpoints=self.endpoints,
            ports=self.ports,
            certificate=certificate,
            ca_pem=self.pki.ca_pem,
            ray_auth_token=self.pki.ray_auth_token,
        )
        return json_answer(200, answer)

    # --- POST /heartbeat (port B) ----------------------------------------------------------

    def heartbeat(self, peer_cert_der: bytes | None, body: bytes) -> Answer:
        identity = pki.worker_identity(peer_cert_der) if peer_cert_der else None
        parsed = self._parse(messages.HEARTBEAT, body, "heartbeat")
        if isinstance(parsed, Answer):
            return parsed
        beat = messages.Heartbeat.of(parsed, received_at=self.clock.now())
        decision = self._decide(
            lambda records, now: heartbeats.heartbeat(
                records, identity, beat, cluster=self.cluster, lineage=self.lineage, now=now
            )
        )
        if decision.refusal is not None:
            return refusal_answer(decision.refusal)
        w = self.spec.watchdogs
        return json_answer(
            200,
            {
                "ok": True,
                "heartbeat_interval_seconds": float(w.heartbeat_interval_seconds),
                "worker_gives_up_after_seconds": float(w.worker_gives_up_after_seconds),
            },
        )

    # --- POST /report ----------------------------------------------------------------------

    def report(self, body: bytes) -> Answer:
        parsed = self._parse(messages.REPORT, body, "report")
        if isinstance(parsed, Answer):
            return parsed
        message = messages.Report.of(parsed)
        log.warning(
            "cluster %s: instance %d (%s) reports %s before destroying itself: %s",
            self.cluster,
            message.instance_id,
            message.phase,
            message.reason,
            message.detail,
        )
        decision = self._decide(
            lambda records, now: reports.report(
                records, message, cluster=self.cluster, lineage=self.lineage, now=now
            )
        )
        if decision.refusal is not None:
            return refusal_answer(decision.refusal)
        return json_answer(200, {"ok": True})

    # --- GET /agent ------------------------------------------------------------------------

    def agent_download(self) -> Answer:
        return Answer(
            200,
            self.agent.data,
            content_type="application/zip",
            headers={"X-RV-Agent-SHA256": self.agent.sha256},
        )

    # --- refused at the TLS layer ----------------------------------------------------------

    def refused_handshake(self, port: str, peer: str, error: str) -> None:
        """A peer the TLS layer refused (no certificate, another CA's): kept in the ledger, at
        most once a minute per peer address and reason."""
        now = time.monotonic()
        key = (peer, error)
        with self._guard:
            last = self._handshake_noted.get(key)
            if last is not None and now - last < self.handshake_note_interval:
                return
            if len(self._handshake_noted) > 10_000:
                self._handshake_noted.clear()
            self._handshake_noted[key] = now
        cls = "heartbeat_refused" if port == "heartbeat" else "tls_refused"
        self._detected(
            Note(
                LedgerKind.DETECTION,
                cls,
                f"{port} port: TLS handshake with {peer} refused: {error}",
                data={"refused": "tls", "peer": peer, "port": port},
            )
        )

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        """Alerts not added again because the same one was raised within the last minute, by
        (cluster, class), since this head started."""
        with self._guard:
            return dict(self._alert_repeats)

    # --- helpers ---------------------------------------------------------------------------

    def _parse(self, schema: str, body: bytes, what: str) -> dict[str, Any] | Answer:
        try:
            return messages.parse(schema, body)
        except messages.BadMessage as exc:
            self._detected(
                Note(
                    LedgerKind.DETECTION,
                    "bad_agent_message",
                    f"{what}: malformed message refused: {exc}",
                    data={"refused": "bad_request"},
                )
            )
            return refusal_answer(Refusal(400, "bad_request", str(exc)))

    def _decide(self, decide: Callable[[Records, float], Decision[T]]) -> Decision[T]:
        """Run a decision on the current records, save what it changed, write its notes (all
        under the records lock, so the ledger's order is the decisions' order), then hand its
        destroys to the destroyer."""
        with self.host.lock:
            before = self.host.records()
            now = self.clock.now()
            decision = decide(before, now)
            self._commit(before, decision.records, decision.notes, now)
        for destroy in decision.destroys:
            self.destroyer.submit(destroy)
        return decision

    def _detected(self, note: Note) -> None:
        """A detection outside any decision (a refused message or handshake), committed alone."""
        with self.host.lock:
            before = self.host.records()
            self._commit(before, before, (note,), self.clock.now())

    def _commit(self, before: Records, records: Records, notes: Sequence[Note], now: float) -> None:
        """Under the records lock: save `records` with the alerts its detections raise, then
        write the notes to the ledger in order, then say the alerts in the log."""
        alerts = self._alerts(records, notes, now)
        if alerts:
            records = replace(records, alerts=(*records.alerts, *alerts))
        if records is not before:
            saved = records
            self.host.mutate(lambda _records, _now: saved)
        for note in notes:
            self._note(note)
            if note.kind is LedgerKind.DETECTION:
                log.info("cluster %s: %s", self.cluster, note.message)
        for alert in alerts:
            log.warning(
                "cluster %s: ALERT %s%s: %s",
                alert.cluster,
                alert.cls,
                f" on {alert.record}" if alert.record else "",
                alert.message,
                extra={"cluster": alert.cluster, "cls": alert.cls, "record": alert.record},
            )

    def _alerts(self, records: Records, notes: Sequence[Note], now: float) -> list[Alert]:
        """The alerts the detections among `notes` raise through the routing table, less those
        raised (with the same cluster, class and record) within the last minute."""
        alerting = [n for n in notes if n.kind is LedgerKind.DETECTION and route(n.cls).alerts]
        if not alerting:
            return []
        recent = {
            (a.cluster, a.cls, a.record)
            for a in records.alerts
            if now - a.at < self.alert_repeat_seconds
        }
        raised: list[Alert] = []
        for note in alerting:
            key = (self.cluster, note.cls, note.record)
            if key in recent:
                with self._guard:
                    counted = (self.cluster, note.cls)
                    self._alert_repeats[counted] = self._alert_repeats.get(counted, 0) + 1
                continue
            recent.add(key)
            raised.append(Alert(now, self.cluster, note.cls, note.message, note.record))
        return raised

    def _note(self, note: Note) -> None:
        self.ledger.log(
            self.cluster,
            note.kind,
            note.cls,
            note.message,
            record=note.record,
            instance=note.instance,
            data=note.data,
        )
