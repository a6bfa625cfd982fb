"""The recorded state: one record per thing the reconciler answers for (DESIGN.md section 3).

Records are immutable; a decision produces new records with `dataclasses.replace` (or `evolve`,
which builds the same at a fraction of the cost: `model/evolve.py`). Every record that can be
acted on carries `managed_by` (the lineage of the state that made it) and `intent`,
because a row that reads a machine's state must also read whether we answer for that state.

Two neighbours hold what these records carry but do not decide: `model/labels.py` writes and reads
the label each instance is rented with, and `model/stretches.py` opens and closes the stretches of
an instance's bill (quiet, stopped, dark).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from reconciler import settings
from reconciler.model.evolve import evolve
from reconciler.model.recordindex import RecordIndex
from reconciler.model.requestrecord import Request


class Intent(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DESTROYED = "destroyed"


class Role(StrEnum):
    CANDIDATE = "candidate"
    WORKER = "worker"


class Phase(StrEnum):
    """Where one instance is in its life (DESIGN.md section 4)."""

    PENDING_CREATE = "pending-create"
    RENTING = "renting"
    PULLING = "pulling"
    RUNNING = "running"
    ENROLLED = "enrolled"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DESTROYING = "destroying"
    DESTROYED = "destroyed"


@dataclass(frozen=True)
class Stretch:
    """A stretch of time from `start` to `end` (None: it goes on)."""

    start: float
    end: float | None = None


@dataclass(frozen=True)
class InstanceRecord:
    """One vast instance we rented (or are about to rent): a candidate or a worker."""

    id: str
    cluster: str
    node_type: str
    managed_by: str
    label: str
    role: Role
    intent: Intent
    phase: Phase
    created_at: float
    offer_id: int
    machine_id: int
    host_id: int
    dph_total: float
    storage_dph: float = 0.0
    request_id: str | None = None
    slot_id: str | None = None
    vast_id: int | None = None
    first_observed_at: float | None = None
    first_running_at: float | None = None
    provider_seen_at: float | None = None
    # The first complete listing that did not show it, since the last one that did; cleared when
    # a listing shows it again. "Missing for 60 s" is measured from here, so listings that failed
    # in between (unknown) never count as listings without it.
    missing_since: float | None = None
    # The last listing that showed it running: the provider's liveness channel for the lost net
    # (an `offline` or `unknown` host is listed, but vast is not hearing from it either).
    provider_ok_at: float | None = None
    probe_ok_at: float | None = None
    self_report_at: float | None = None
    enrolled_at: float | None = None
    public_ip: str | None = None
    # The public address vast's latest listing gives it: traffic from there provably comes from
    # this instance (DESIGN.md 10, "Who may cause a destroy from the network").
    listed_ip: str | None = None
    # The source address its enrollment came from (what it says of itself, `public_ip`, proves
    # nothing; where its packets came from does).
    enrolled_from: str | None = None
    # The serial of the client certificate its enrollment answer carried (revoked when a lost
    # answer is replaced, and when its record ends; never for being lost, DESIGN.md 11).
    cert_serial: int | None = None
    stop_due_at: float | None = None
    destroy_due_at: float | None = None
    # Work holds it (reaper gate 3): `pinned` while Ray reports work on its node (leased
    # resources, actors, placement-group bundles), refreshed from Ray on every tick; `pinned_by`
    # is a person's pin (`ray-vast pin`), until `pinned_until` (None: until `ray-vast unpin`).
    pinned: bool = False
    pinned_by: str | None = None
    pinned_until: float | None = None
    exempt: bool = False
    lost: bool = False
    # Set by the boot-failure net on the first tick that sees a machine past its boot window; the
    # net acts only when a later tick confirms it (start-up failure re-confirmed across ticks).
    boot_suspect_at: float | None = None
    # The last utilisation sample the agent sent, and whether it showed traffic.
    sample_at: float | None = None
    sample_busy: bool = False
    ended_reason: str | None = None
    ended_at: float | None = None
    # The clocks of the bill (`ray-vast cost`, reconciler/model/cost.py; moved by
    # reconciler/model/stretches.py): when the head first saw Ray running on the worker
    # (serving); its quiet stretches, each from the idle scanner arming the money chain's timers
    # to the traffic that cleared them (the last one open while they are armed; beyond
    # `QUIET_KEPT` the oldest are folded into `quiet_folded` seconds, so a worker that flaps
    # between quiet and busy does not grow its record); and the stretches it was stopped, from
    # our stop call (or the listing that showed vast had stopped it) to our start.
    serving_at: float | None = None
    quiet: tuple[Stretch, ...] = ()
    quiet_folded: float = 0.0
    stopped: tuple[Stretch, ...] = ()
    # The stretches vast listed it but not running with no stop of ours (its host `unknown` or
    # `offline`, its container exited): from the last listing that showed it running to the
    # first that shows it running again. vast billed storage only (found by the adversary: a
    # host that went dark and came back was priced in full, +24% on a cluster's bill).
    dark: tuple[Stretch, ...] = ()
    # When vast says it first ran (the first running listing less its `uptime_mins`): where its
    # GPU bill began. The limits never read it (they run from our own first sight of it running,
    # `first_running_at`); the bill does (the adversary: a candidate ended a minute after we first
    # saw it running was priced from that sight, up to half its bill short).
    ran_from: float | None = None
    # A destroy or stop that vast has not confirmed yet (a transitional state): how many calls
    # were made, and when the next one is due (backoff after a failure; a stop that vast accepted
    # is checked again after a while). Cleared when vast confirms.
    call_attempts: int = 0
    retry_at: float | None = None
    # A deliberate stop (DESIGN.md 10): when the head answered the worker's report of the
    # money chain's stop with "deliberate stop" (the worker keeps its certificate and key on its
    # disk and lets the container stop); cleared when the worker resumes. Only such a worker is
    # started again for demand, and only its resume is let in.
    stopped_deliberately_at: float | None = None
    # When the planner last asked vast to start it again (the start-stuck limit runs from here,
    # and so does the went-silent clock of a worker that was stopped).
    start_requested_at: float | None = None
    # The boot that resumed it with its saved certificate (its lost answer is answered again).
    resumed_boot: str | None = None
    # The reason of the worker's own report when it ended itself (the head took the report and
    # ended the record): a failure report, which the breaker reads for short lives.
    reported: str | None = None
    # What the rent-loop breaker made of this worker's life, once (`planning/breaker.py`):
    # "served" (it served `min_service_seconds`: the configuration is proven) or "short" (it
    # ended with a failure report before that: its slot counts as one with no worker).
    breaker_mark: str | None = None
    # The money chain's stop as a handshake with the agent (DESIGN.md 11, `model.stopping`):
    # when the head recorded intent stopped and began to answer heartbeats "stop pending"; when
    # the agent acknowledged (from then on Ray's exit is part of the stop: the node is drained,
    # then vast's stop is called); when a stop was called off before vast's stop (a rejected
    # drain, traffic, demand): the next heartbeat answer says "cancelled".
    stop_asked_at: float | None = None
    stop_acked_at: float | None = None
    stop_cancelled_at: float | None = None

    @property
    def live(self) -> bool:
        """Scans skip destroyed records (rule 4): nothing re-arms against a dead instance."""
        return self.phase is not Phase.DESTROYED

    # The transitions of phase and intent, written once (issue 22): rented, enrolled, serving, a
    # start asked and under way, a destroy decided, a machine ended for good, vast's stop called.
    # Nothing outside these (and model/stopping.py's handshake) sets a phase or an intent by hand,
    # but a record's first one and the listing's reading of a status (planning/refresh.py).

    def rented(self, vast_id: int, **also: Any) -> InstanceRecord:
        """vast has the instance (its create answered, or the listing shows the label)."""
        return evolve(self, vast_id=vast_id, phase=Phase.RENTING, **also)

    def enrolled(self, now: float, **also: Any) -> InstanceRecord:
        """Its agent proved itself to the head (enrolled, or resumed after a stop)."""
        return evolve(self, phase=Phase.ENROLLED, self_report_at=now, **also)

    def serving(self, now: float) -> InstanceRecord:
        """Its Ray joined the head: serving from now (the first time it is seen so)."""
        return evolve(self, phase=Phase.SERVING, serving_at=self.serving_at or now)

    def start_asked(self) -> InstanceRecord:
        """A start of a stopped machine decided, before vast's call: intent running."""
        return evolve(self, intent=Intent.RUNNING)

    def start_called(self, now: float) -> InstanceRecord:
        """vast's start answered: it boots again (pulling), the stopped stretch closed at `now`."""
        stopped, last = self.stopped, self.stopped[-1] if self.stopped else None
        if last is not None and last.end is None:
            stopped = (*stopped[:-1], Stretch(last.start, max(last.start, now)))
        return evolve(self, stopped=stopped, phase=Phase.PULLING)

    def doomed(self, **also: Any) -> InstanceRecord:
        """Its destroy decided, the call to vast next: intent destroyed, phase destroying."""
        return evolve(self, intent=Intent.DESTROYED, phase=Phase.DESTROYING, **also)

    def closed(self, at: float, reason: str, **also: Any) -> InstanceRecord:
        """Ended for good (destroyed, gone from vast, never created): intent and phase
        destroyed, when and why."""
        fields = {"intent": Intent.DESTROYED, "phase": Phase.DESTROYED, **also}
        return evolve(self, ended_at=at, ended_reason=reason, **fields)

    def stop_called(self) -> InstanceRecord:
        """vast's stop about to be called: intent stopped, phase stopping."""
        return evolve(self, intent=Intent.STOPPED, phase=Phase.STOPPING)

    def held(self, now: float) -> bool:
        """Whether work (Ray's or a person's pin) holds this machine at `now`: no machine-level
        reaper may end or stop it (reaper gate 3)."""
        if self.pinned:
            return True
        return self.pinned_by is not None and (self.pinned_until is None or now < self.pinned_until)

    @property
    def billing_dph(self) -> float:
        """What this record costs per hour as recorded: storage only once vast confirmed the stop;
        full price until then (a stop that failed or is under way still bills in full)."""
        if self.phase is Phase.DESTROYED:
            return 0.0
        if self.phase is Phase.STOPPED:
            return self.storage_dph
        return self.dph_total


@dataclass(frozen=True)
class BlockEntry:
    host_id: int
    until: float
    reason: str
    # The node type whose candidate failed there, when, and under which configuration digest:
    # a change of that configuration lifts the entries a configuration fault explains (DESIGN.md
    # 11); the breaker never lifts one.
    node_type: str | None = None
    at: float | None = None
    digest: str | None = None
    # Other configurations whose failure there this entry also stands for (one entry a host: a
    # later failure under another configuration merges into it instead of erasing the first).
    also: tuple[str, ...] = ()

    def explains(self, digest: str) -> bool:
        """Whether this entry was made by a failure under configuration `digest`."""
        return digest == self.digest or digest in self.also


@dataclass(frozen=True)
class Halt:
    """A node type stopped for good: a permanent failure that every host would repeat (an image
    whose Ray or Python the head's Ray refuses). No rental for it until its image or env changes
    (`fingerprint` is theirs when it was halted); a person is alerted."""

    at: float
    cls: str  # the ledger class of the failure (reconciler/model/routing.py)
    reason: str  # in plain words, as the ledger, the alert and `status` say it
    image: str
    fingerprint: str  # `rayversions.fingerprint` of the node type's image and env
    record: str | None = None  # the candidate whose enrollment showed it


@dataclass(frozen=True)
class BreakerState:
    """The rent-loop breaker of one node type (`planning/breaker.py` says how it moves).

    The count and the proof belong to one configuration of the node type (`digest`); a change
    of it resets them. `consecutive_empty` is the seed's count of slots in a row with no worker
    (an enrollment sets it to 0); `short_lives` the workers in a row that ended with a failure
    report before serving `min_service_seconds` (only a worker that served that long sets it to
    0); the breaker opens when the two reach `breaker.slots`. `proven`: a worker of this
    configuration has served `min_service_seconds` since the last opening (until then the canary
    rule holds). `openings`: openings in a row with no such worker between them (the pause
    doubles with each)."""

    consecutive_empty: int = 0
    paused_until: float | None = None
    # When the current streak of slots with no worker began (None: no streak).
    since: float | None = None
    # A pause with no end (a permanent failure of the node type), lifted only by a change of
    # its image or env; the count and the timed pause go on beside it.
    halt: Halt | None = None
    digest: str | None = None
    short_lives: int = 0
    proven: bool = False
    openings: int = 0
    # The canary cycle (while not proven): since when its slots are counted (None: since the
    # start), and how many of them ended with no worker (an opening, a proof or a change of the
    # configuration starts a new one; an enrollment does not).
    cycle_from: float | None = None
    cycle_failed: int = 0
    # Why it last opened, in plain words (`status` says it while the pause lasts).
    reason: str | None = None

    @property
    def count(self) -> int:
        """Slots in a row with no worker, short lives included: what opens the breaker."""
        return self.consecutive_empty + self.short_lives

    def halted(self, fingerprint: str) -> bool:
        """Whether the halt holds for the node type as its image and env are now."""
        return self.halt is not None and self.halt.fingerprint == fingerprint


@dataclass(frozen=True)
class JoinToken:
    """A single-use enrollment token, stored only as its hash, bound to one record and boot."""

    token_hash: str
    record_id: str
    cluster: str
    issued_at: float
    expires_at: float
    used_at: float | None = None
    boot_id: str | None = None


@dataclass(frozen=True)
class Alert:
    """Something a person should look at; shown by `status` until acknowledged."""

    at: float
    cluster: str
    cls: str
    message: str
    record: str | None = None


@dataclass(frozen=True)
class PoolState:
    """A node type's pool: since when nothing has asked for it or worked on it."""

    idle_since: float | None = None


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    spec_digest: str
    revision: str | None = None
    document: str = ""  # the spec last applied (JSON), for commands run with no spec directory
    # When `ray-vast down` ended the cluster: from then on `watch` holds it at zero machines
    # (it rents nothing for it and ends what is left of it) until the cluster's spec changes or
    # it is applied again, so a controller reconciling an unchanged spec does not rent it back.
    down_at: float | None = None

    def holds_down(self, digest: str) -> bool:
        """Whether this record holds its cluster down against a spec of this digest."""
        return self.down_at is not None and digest == self.spec_digest


@dataclass(frozen=True)
class Records:
    """Everything the state file remembers, keyed for lookup."""

    instances: Mapping[str, InstanceRecord] = field(default_factory=dict)
    requests: Mapping[str, Request] = field(default_factory=dict)
    blocklist: Mapping[str, Mapping[int, BlockEntry]] = field(default_factory=dict)
    breakers: Mapping[str, BreakerState] = field(default_factory=dict)
    pools: Mapping[str, PoolState] = field(default_factory=dict)
    clusters: Mapping[str, ClusterRecord] = field(default_factory=dict)
    tokens: Mapping[str, JoinToken] = field(default_factory=dict)
    revoked_certs: tuple[int, ...] = ()
    alerts: tuple[Alert, ...] = ()
    # Instances labelled ours with no live record: vast id -> when we first saw them, so the
    # orphan sweep's grace runs from our own first observation, never from vast's start_date.
    unrecorded_seen: Mapping[int, float] = field(default_factory=dict)
    next_id: int = 1

    @cached_property
    def index(self) -> RecordIndex:
        """The records and requests by cluster and node type (built at the first question)."""
        return RecordIndex(self.instances, self.requests)

    def live_instances(self, cluster: str | None = None) -> list[InstanceRecord]:
        return [
            r
            for r in self.instances.values()
            if r.live and (cluster is None or r.cluster == cluster)
        ]

    def by_vast_id(self) -> dict[int, InstanceRecord]:
        return {r.vast_id: r for r in self.instances.values() if r.vast_id is not None}

    def blocked_hosts(self, cluster: str, now: float) -> dict[int, BlockEntry]:
        entries = self.blocklist.get(cluster, {})
        return {host: e for host, e in entries.items() if e.until > now}


def breaker_key(cluster: str, node_type: str) -> str:
    return f"{cluster}/{node_type}"


def retry_delay(attempts: int) -> float:
    """Seconds before call number `attempts + 1` of a destroy or stop that did not take."""
    return float(
        min(settings.RETRY_MAX_SECONDS, settings.RETRY_FIRST_SECONDS * 2 ** max(0, attempts - 1))
    )
