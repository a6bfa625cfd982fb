"""The head's agent endpoints as an application: bytes in, an answer out, no sockets.

`HeadApp` is what the TLS servers of `service` call, and what a test or the watch controller can
call in-process. Each handler parses and validates the message against its schema, takes the
records lock, runs the pure decision, saves the records it returns, writes its notes to the ledger
(in order, under the same lock) and answers. The destroys a decision asks for are handed to the
one applier's thread, so the agent is answered at once and the calls still go out at once.

Every detection the head notes goes through the one routing table (DESIGN.md rule 8), as the
nets' do: when its class alerts a human (a failed token check, a malformed agent message, a class
the table does not know), an `Alert` joins the records in the same locked change and is logged at
WARNING. The same alert (cluster, class, record) is kept once per the one repeat window
(planning/alerts.py); the repeats are counted in memory (`alert_repeats`), so a stranger who
keeps sending junk cannot fill the state.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reconciler import rayruntime
from reconciler.clock import Clock
from reconciler.head import enrollment, heartbeats, limits, messages, pki, reports
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan, enroll_answer, resume_answer
from reconciler.head.decisions import Decision, Note, Refusal
from reconciler.head.shared import LedgerSink, RecordsStore, Submits
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import Alert, Records
from reconciler.model.routing import route
from reconciler.model.spec import ClusterSpec
from reconciler.planning import alerts
from reconciler.state.ledger import LedgerEvent, LedgerKind

T = TypeVar("T")
log = logging.getLogger("reconciler.head")


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
        host: RecordsStore,
        ledger: LedgerSink,
        applier: Submits,
        lineage: str,
        clock: Clock,
        endpoints: HeadEndpoints,
        agent: AgentBundle,
        ports: PortPlan | None = None,
        versions: RayVersions | None = None,
    ) -> None:
        self.spec = spec
        self.pki = cluster_pki
        self.host = host
        self.ledger = ledger
        self.applier = applier
        self.lineage = lineage
        self.clock = clock
        self.endpoints = endpoints
        self.agent = agent
        self.ports = ports or PortPlan()
        # The head's Ray and Python, read when the service starts (a test names its own):
        # a candidate whose image runs others is refused, as Ray would refuse it.
        self.versions = versions if versions is not None else rayruntime.local()
        # The watch controller may hold enrollment (503, the candidate retries) while it catches up.
        self.accepting_enrollments = True
        self._guard = threading.Lock()
        self._alert_repeats: dict[tuple[str, str], int] = {}
        # what unproven traffic may cost: a bucket per source, refusals noted in aggregate
        self.buckets = limits.SourceBuckets()
        self.unproven = limits.RefusalTally()

    @property
    def cluster(self) -> str:
        return self.spec.name

    def set_spec(self, spec: ClusterSpec) -> None:
        """A new version of the cluster spec (thresholds, node types) after a spec reload."""
        self.spec = spec

    # --- POST /enroll ----------------------------------------------------------------------

    def enroll(self, body: bytes, peer: str | None = None) -> Answer:
        """`peer`: the request's source address (the TLS server's; None in-process)."""
        limited = self._limited(peer)
        if limited is not None:
            return limited
        if not self.accepting_enrollments:
            return refusal_answer(Refusal(503, "not_ready", "the head is not enrolling yet"))
        parsed = self._parse(messages.ENROLL_REQUEST, body, "enroll", peer)
        if isinstance(parsed, Answer):
            return parsed
        request = messages.EnrollRequest.of(parsed)
        if not request.public_ip:
            note = Note(
                LedgerKind.DETECTION,
                "bad_agent_message",
                f"enroll: instance {request.instance_id} names no public IP; refused",
                data={"refused": "bad_request", "unproven": True},
            )
            self._unproven([note], peer)
            return refusal_answer(Refusal(400, "bad_request", "the container has no public IP"))
        serial = pki.new_serial()
        decision = self._decide(
            lambda records, now: enrollment.enroll(
                records,
                request,
                cluster=self.cluster,
                lineage=self.lineage,
                now=now,
                serial=serial,
                peer=peer,
                head=self.versions,
                spec=self.spec,
            ),
            peer,
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

    def heartbeat(
        self, peer_cert_der: bytes | None, body: bytes, peer: str | None = None
    ) -> Answer:
        identity = pki.worker_identity(peer_cert_der) if peer_cert_der else None
        parsed = self._parse(messages.HEARTBEAT, body, "heartbeat", peer)
        if isinstance(parsed, Answer):
            return parsed
        beat = messages.Heartbeat.of(parsed, received_at=self.clock.now())
        decision = self._decide(
            lambda records, now: heartbeats.heartbeat(
                records, identity, beat, cluster=self.cluster, lineage=self.lineage, now=now
            ),
            peer,
        )
        if decision.refusal is not None:
            return refusal_answer(decision.refusal)
        w = self.spec.watchdogs
        answer: dict[str, Any] = {
            "ok": True,
            "heartbeat_interval_seconds": float(w.heartbeat_interval_seconds),
            "worker_gives_up_after_seconds": float(w.worker_gives_up_after_seconds),
        }
        if decision.outcome is not None and decision.outcome.stop is not None:
            answer["stop"] = decision.outcome.stop  # the money chain's stop (DESIGN.md 11)
        return json_answer(200, answer)

    # --- POST /resume (port B) -------------------------------------------------------------

    def resume(self, peer_cert_der: bytes | None, body: bytes, peer: str | None = None) -> Answer:
        """A worker the head stopped deliberately, back with its kept certificate after the head
        started its instance again (DESIGN.md 10): the enrollment answer again, without a
        certificate; any other restart is refused (the worker reports and destroys itself)."""
        identity = pki.worker_identity(peer_cert_der) if peer_cert_der else None
        parsed = self._parse(messages.RESUME, body, "resume", peer)
        if isinstance(parsed, Answer):
            return parsed
        request = messages.ResumeRequest.of(parsed)
        decision = self._decide(
            lambda records, now: enrollment.resume(
                records,
                identity,
                request,
                cluster=self.cluster,
                lineage=self.lineage,
                now=now,
            ),
            peer,
        )
        if decision.refusal is not None or decision.outcome is None:
            return refusal_answer(decision.refusal or Refusal(500, "bad_request", "no decision"))
        answer = resume_answer(
            decision.outcome,
            request,
            spec=self.spec,
            endpoints=self.endpoints,
            ports=self.ports,
            ray_auth_token=self.pki.ray_auth_token,
        )
        return json_answer(200, answer)

    # --- POST /report ----------------------------------------------------------------------

    def report(self, body: bytes, peer: str | None = None) -> Answer:
        limited = self._limited(peer)
        if limited is not None:
            return limited
        parsed = self._parse(messages.REPORT, body, "report", peer)
        if isinstance(parsed, Answer):
            return parsed
        message = messages.Report.of(parsed)
        decision = self._decide(
            lambda records, now: reports.report(
                records, message, cluster=self.cluster, lineage=self.lineage, now=now
            ),
            peer,
        )
        if decision.refusal is not None:
            return refusal_answer(decision.refusal)  # unproven: tallied, no log line each
        if decision.outcome:
            log.info(
                "cluster %s: instance %d stops as the head asked (deliberate stop): its disk "
                "is kept",
                self.cluster,
                message.instance_id,
            )
            return json_answer(200, {"ok": True, "deliberate_stop": True})
        log.warning(
            "cluster %s: instance %d (%s) reports %s before destroying itself: %s",
            self.cluster,
            message.instance_id,
            message.phase,
            message.reason,
            message.detail,
        )
        return json_answer(200, {"ok": True})

    # --- GET /agent ------------------------------------------------------------------------

    def agent_download(self, peer: str | None = None) -> Answer:
        limited = self._limited(peer)  # 89 KB an answer: a stranger gets its bucket's worth
        if limited is not None:
            return limited
        return Answer(
            200,
            self.agent.data,
            content_type="application/zip",
            headers={"X-RV-Agent-SHA256": self.agent.sha256},
        )

    # --- refused at the TLS layer ----------------------------------------------------------

    def refused_handshake(self, port: str, peer: str, error: str) -> None:
        """A peer the TLS layer refused (no certificate, another CA's, not TLS at all): unproven
        traffic, noted in aggregate (at most once a minute per peer address and class)."""
        cls = "heartbeat_refused" if port == "heartbeat" else "tls_refused"
        note = Note(
            LedgerKind.DETECTION,
            cls,
            f"{port} port: TLS handshake with {peer} refused: {error}",
            data={"refused": "tls", "port": port, "unproven": True},
        )
        self._unproven([note], peer)

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        """Alerts not added again because the same one was raised within the last minute, by
        (cluster, class), since this head started."""
        with self._guard:
            return dict(self._alert_repeats)

    # --- helpers ---------------------------------------------------------------------------

    def _parse(
        self, schema: str, body: bytes, what: str, peer: str | None
    ) -> dict[str, Any] | Answer:
        try:
            return messages.parse(schema, body)
        except messages.BadMessage as exc:
            note = Note(
                LedgerKind.DETECTION,
                "bad_agent_message",
                f"{what}: malformed message refused: {exc}",
                data={"refused": "bad_request", "unproven": True},
            )
            self._unproven([note], peer)
            return refusal_answer(Refusal(400, "bad_request", str(exc)))

    def _limited(self, peer: str | None) -> Answer | None:
        """429 for a source past its bucket (counted, noted in aggregate; nothing else)."""
        if peer is None or self.buckets.take(peer, self.clock.now()):
            return None
        note = Note(
            LedgerKind.DETECTION,
            "rate_limited",
            "too many requests from one address: answered 429",
            data={"refused": "rate_limited", "unproven": True},
        )
        self._unproven([note], peer)
        answer = refusal_answer(Refusal(429, "rate_limited", "too many requests; slow down"))
        return replace(answer, headers={"Retry-After": "1"})

    def _unproven(self, notes: Sequence[Note], peer: str | None) -> None:
        """Refusals of traffic that proved nothing: counted, and at most one ledger line per
        source and class a minute, carrying the count. They changed no record; only the rare line
        that is written takes the records lock (for the alert it may raise)."""
        source = peer or "in-process"
        now = self.clock.now()
        due = []
        for note in notes:
            count = self.unproven.count(source, note.cls, now)
            if count:
                data = {**note.data, "peer": source, "count": count}
                shown = f"{note.message} [{count} such from {source} since the last line]"
                due.append(replace(note, message=shown, data=data))
        if due:
            with self.host.lock:
                before = self.host.records()
                self._commit(before, before, due, now)

    def _decide(
        self, decide: Callable[[Records, float], Decision[T]], peer: str | None = None
    ) -> Decision[T]:
        """Run a decision on the current records, save what it changed, write its notes (all
        under the records lock, so the ledger's order is the decisions' order), then hand its
        destroys to the applier. Notes of unproven traffic (the decision changed nothing) go to
        the tally instead, outside the lock."""
        with self.host.lock:
            before = self.host.records()
            now = self.clock.now()
            decision = decide(before, now)
            proven = [n for n in decision.notes if not n.data.get("unproven")]
            if proven or decision.records is not before:
                self._commit(before, decision.records, proven, now, kept=decision.clocks_only)
        unproven = [n for n in decision.notes if n.data.get("unproven")]
        if unproven:
            self._unproven(unproven, peer)
        self.applier.submit(decision.destroys)
        return decision

    def _detected(self, note: Note) -> None:
        """A detection outside any decision (a refused message or handshake), committed alone."""
        with self.host.lock:
            before = self.host.records()
            self._commit(before, before, (note,), self.clock.now())

    def _commit(
        self,
        before: Records,
        records: Records,
        notes: Sequence[Note],
        now: float,
        *,
        kept: bool = False,
    ) -> None:
        """Under the records lock: save `records` with the alerts its detections raise (`kept`:
        a change of clocks only, which the host may write within seconds), then write the notes
        to the ledger in order, then say the alerts in the log."""
        alerts = self._alerts(records, notes, now)
        if alerts:
            records = replace(records, alerts=(*records.alerts, *alerts))
        if records is not before and kept:  # clocks only: no notes, so no alerts either
            self.host.keep(records, now)
        elif records is not before:
            saved = records
            self.host.update(lambda _records: saved)
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
        """The alerts the detections among `notes` raise through the routing table, less the
        repeats the one window holds back (planning/alerts.py); those are counted."""
        concerns = [
            alerts.Concern(self.cluster, n.cls, n.message, n.record)
            for n in notes
            if n.kind is LedgerKind.DETECTION and route(n.cls).alerts
        ]
        if not concerns:
            return []
        raised, repeats = alerts.fresh(records.alerts, concerns, now)
        with self._guard:
            for concern in repeats:
                counted = (self.cluster, concern.cls)
                self._alert_repeats[counted] = self._alert_repeats.get(counted, 0) + 1
        return raised

    def _note(self, note: Note) -> None:
        self.ledger.append(
            LedgerEvent(
                self.cluster,
                note.kind,
                note.cls,
                note.message,
                record=note.record,
                instance=note.instance,
                data=note.data,
            )
        )
