"""The adversary's invariants, checked after every controller tick (`Judge.after_tick`) and at the
end (`Judge.finish`). Each is judged against the ground truth the world knows (which container,
host or instance it broke, and when; each node's work) and the story the controller left (its
ledger, its records, vastsim's instances and meter), never against the controller's own opinion
of what was healthy.

1. Rentals per breaker cycle <= `breaker.slots x candidate_factor` (DESIGN.md 11, canary rule).
   A node type's time line is cut at each breaker opening (its `paused_until` moves), each change
   of its configuration (the fingerprint of image and env), and each enrollment of one of its
   workers that served: lived `MIN_SERVICE` seconds after enrolling, or was ended by a deliberate
   decision (money chain, scale-down, prune, `down`), or is still up (provisionally: a worker
   still up is taken as serving until it ends short), and again where such a worker proved the
   configuration (`MIN_SERVICE` after enrolling, or its deliberate end before that: a worker
   that enrolled before an opening and serves on past it ends that canary cycle, as the
   controller's breaker says, seed 107). A cycle that begins at the start, at an
   opening or at a change of configuration is a canary cycle: no worker has served since it
   began, so the canary rule holds throughout it, and its rentals (the `rent` outcomes of the
   node type whose request carries the current configuration) may not exceed the bound. A cycle
   that begins at an enrollment is the healthy regime and is not bounded (a request of 8 slots
   may rent 16 once the configuration has served). Conservative: a worker that enrolls and dies
   short does not end a cycle, since the canary rule makes a short life a slot with no worker.
2. No healthy machine ended: a worker (it enrolled) that leaves vast while its container, its
   host and its instance have had no fault (`Play.faulted`) and it was neither lost nor pinned,
   except by `down`, by the prune of a removed spec, by scale-down above `max_workers`, by
   `start_stuck`, or by `idle_destroy` once it was stopped or quiet for its stop timer (less
   `SLACK`). A money-chain stop of a worker that was busy within its stop timer is a violation
   too, and so is a request watchdog (no-consumer, queue-wait, pool release, stuck dispatch)
   ending any healthy machine, directly or as the `extra_candidate` of the request it ended.
3. A deliberate stop keeps the disk: an instance the money chain stopped (`idle_stop`) does not
   leave vast before its destroy timer, unless it was started again, a fault struck it, or it
   went by `down` or prune.
4. No lost worker ended by the controller: no destroy decision of class `lost`, none of a record
   marked lost other than `went_silent` once its own reports are `went_silent_after` old (or by
   `down` or prune), and a lost worker's certificate is not revoked while its record lives.
5. No pinned machine ended except by `down`: no destroy (nor money-chain stop) decision of a
   record held at that moment (Ray's work or a person's pin in force).
6. Every billing instance at vast has a record that will end it: a live record of ours names
   it, or it is an orphan inside the sweep's grace (`orphan_grace` + the sweep's cadence +
   `SLACK`) from the tick we first saw it without one.
7. At the end, `ray-vast cost` (the lives in the records and the ledger, `reconciler.model.cost`)
   equals vastsim's meter within 1% per cluster (and a tenth of a cent, for tiny bills); orphans
   still inside their grace are not yet priced by either side's rule and are left out.
8. A blocklisted host stays blocked: a node type does not rent a host that one of its own
   failures blocklisted, before the entry's end, while its configuration is the one that failed
   there (an entry of reason `network` holds whatever the configuration).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetsim.harness import START
from reconciler.model import cost
from reconciler.model.labels import parse_label
from reconciler.model.records import InstanceRecord, Intent, Records, Role
from reconciler.state.ledger import read_ledger

if TYPE_CHECKING:
    from fleetsim.adversary_play import Play

MIN_SERVICE = 600.0
SLACK = 120.0
INVARIANTS: Mapping[int, str] = {
    1: "rentals of a node type per breaker cycle <= breaker.slots x candidate_factor",
    2: "no healthy worker ended",
    3: "a deliberate stop keeps the disk",
    4: "no lost worker ended by the controller",
    5: "no pinned machine ended except by down",
    6: "every billing instance has a record that will end it",
    7: "ray-vast cost equals vastsim's meter within 1%",
    8: "a blocklisted host stays blocked for its node type's configuration",
}
DELIBERATE = frozenset({"down", "removed_from_spec", "scale_down", "idle_destroy", "idle_stop"})
WATCHDOGS = frozenset({"no_consumer", "queue_wait_timeout", "pool_idle_release", "stuck_dispatch"})
Key = tuple[str, str]
Moment = tuple[float, float]


@dataclass(frozen=True)
class Violation:
    invariant: int
    at: float
    what: str
    lines: tuple[str, ...] = ()

    def describe(self) -> str:
        head = f"invariant {self.invariant} ({INVARIANTS[self.invariant]}) at {clock(self.at)}"
        return "\n".join([head, f"  {self.what}", *(f"    {line}" for line in self.lines)])


def clock(at: float) -> str:
    """Virtual time as `+H:MM:SS` from the run's start."""
    s = max(0, round(at - START))
    return f"+{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def line(entry: Mapping[str, Any]) -> str:
    return (
        f"{clock(entry['time'])} {entry['kind']} {entry['class']} {entry.get('record')} "
        f"{entry.get('instance')}: {entry['message'][:160]}"
    )


@dataclass
class Story:
    """What the judge has learnt so far (every fact with its moment)."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, Key] = field(default_factory=dict)  # record id -> node type
    digests: dict[Key, list[tuple[float, str]]] = field(default_factory=dict)
    # moments (time, ledger seq): a tick's lines share its virtual time, the seq orders them
    changes: dict[Key, list[Moment]] = field(default_factory=dict)
    openings: dict[Key, list[Moment]] = field(default_factory=dict)
    pauses: dict[Key, float | None] = field(default_factory=dict)
    blocks: dict[tuple[str, int], dict[tuple[float, str], tuple[Any, str]]] = field(
        default_factory=dict
    )
    rentals: dict[Key, list[tuple[Moment, str, str | None]]] = field(default_factory=dict)
    enrolled: dict[int, tuple[Moment, Key]] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)
    cause: dict[int, dict[str, Any]] = field(default_factory=dict)
    stops: dict[int, tuple[float, float, str]] = field(default_factory=dict)
    unrecorded: dict[int, float] = field(default_factory=dict)
    removed: dict[str, float] = field(default_factory=dict)

    def about(self, record: str | None, instance: int | None, *, last: int = 10) -> tuple[str, ...]:
        found = [
            e
            for e in self.entries
            if (record is not None and e.get("record") == record)
            or (instance is not None and e.get("instance") == instance)
        ]
        return tuple(line(e) for e in found[-last:])

    def digest_at(self, key: Key, at: float) -> str | None:
        found = None
        for since, digest in self.digests.get(key, []):
            if since > at:
                break
            found = digest
        return found


class Counterexample(Exception):
    """The first violation, when the run stops at it (`Judge.stop_at_first`)."""

    def __init__(self, violation: Violation) -> None:
        super().__init__(violation.describe())
        self.violation = violation


class Judge:
    """Checks the invariants of `fleetsim.invariants` on one running fleet."""

    def __init__(self, play: Play) -> None:
        self.play = play
        self.fleet = play.fleet
        self.story = Story()
        self.prev = Records()
        self.live: set[int] = set()
        self.checks = 0
        self.violations: list[Violation] = []
        self._flagged: set[tuple[int, str]] = set()
        self._offset = 0
        self._canary_dirty = False
        self.stop_at_first = False

    # --- bookkeeping ------------------------------------------------------------------------

    def flag(
        self,
        invariant: int,
        at: float,
        what: str,
        key: str,
        lines: Sequence[str],
        *,
        vast_id: int | None = None,
    ) -> None:
        if (invariant, key) in self._flagged:
            return
        self._flagged.add((invariant, key))
        if vast_id is not None:
            broke = self.play.faulted(vast_id, at)
            what += f" [the world: {broke or 'no fault'} on instance {vast_id} by then]"
        self.violations.append(Violation(invariant, at, what, tuple(lines)))
        if self.stop_at_first:
            raise Counterexample(self.violations[-1])

    def _tail(self) -> list[dict[str, Any]]:
        path = self.fleet.ledger
        with path.open("rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        new = [json.loads(raw) for raw in data[:end].splitlines() if raw.strip()]
        self.story.entries.extend(new)
        return new

    def _learn(self, records: Records, now: float, new: Sequence[Mapping[str, Any]]) -> None:
        story = self.story
        last = float(story.entries[-1]["seq"]) if story.entries else 0.0
        # A spec edit is made between ticks (`Play.step`), so it comes before this tick's entries
        # (seed 35: learned after them, the new image's first rentals fell in the old cycle).
        changed = (float(new[0]["time"]), float(new[0]["seq"]) - 0.5) if new else (now, last + 0.5)
        opened = [e for e in new if e["class"] == "breaker_open" and e["kind"] == "decision"]
        for r in records.instances.values():
            story.nodes.setdefault(r.id, (r.cluster, r.node_type))
        for name, spec in self.fleet.controller.specs.items():
            for nt in spec.node_types.values():
                digests = story.digests.setdefault((name, nt.name), [])
                digest = nt.ray_fingerprint
                if not digests or digests[-1][1] != digest:
                    if digests:
                        story.changes.setdefault((name, nt.name), []).append(changed)
                    digests.append((now, digest))
                    self._canary_dirty = True
        for key, state in records.breakers.items():
            cluster, _, node = key.partition("/")
            pair = (cluster, node)
            if state.paused_until is not None and state.paused_until != story.pauses.get(pair):
                mine = [e for e in opened if e["cluster"] == cluster]
                moment = (mine[0]["time"], float(mine[0]["seq"])) if mine else (now, last + 0.5)
                if mine:
                    opened.remove(mine[0])
                story.openings.setdefault(pair, []).append(moment)
                self._canary_dirty = True
            story.pauses[pair] = state.paused_until
        for cluster, entries in records.blocklist.items():
            for host, entry in entries.items():
                at = entry.at if entry.at is not None else now
                seen = story.blocks.setdefault((cluster, host), {})
                if (at, entry.reason) in seen:
                    continue
                ran = _failed_under(records, cluster, host, entry.node_type, at)
                if ran is None:
                    ran = story.digest_at((cluster, entry.node_type or ""), at) or ""
                seen[(at, entry.reason)] = (entry, ran)

    # --- after each tick ----------------------------------------------------------------------

    def after_tick(self) -> None:
        from fleetsim import checks  # noqa: PLC0415 - the checks need the judge's types

        now = self.fleet.clock.now()
        records = self.fleet.controller.records()
        new = self._tail()
        self._learn(records, now, new)
        for entry in new:
            checks.entry(self, entry, records)
        instances = self.fleet.sim.instances
        ours = {v for v, inst in instances.items() if parse_label(inst.label) is not None}
        for vast_id in sorted(self.live - ours):
            self.story.ended[vast_id] = now
            self._canary_dirty = True
            checks.ended(self, vast_id, now, records)
        self.live = ours
        checks.stops(self, records)
        checks.billing(self, now, records, instances)
        checks.revoked(self, now, records)
        if self._canary_dirty:
            self._canary_dirty = False
            checks.canary(self, now, final=False)
        self.prev = records

    def finish(self) -> None:
        from fleetsim import checks  # noqa: PLC0415

        checks.canary(self, self.fleet.clock.now(), final=True)
        checks.cost_against_meter(self, self.fleet.clock.now())

    # --- what the checks read -------------------------------------------------------------------

    def record_of(self, vast_id: int, records: Records) -> InstanceRecord | None:
        """The record that answered for an instance (the previous tick's, else the current)."""
        for source in (self.prev, records):
            found = [r for r in source.instances.values() if r.vast_id == vast_id]
            if found:
                return sorted(found, key=lambda r: not r.live)[0]
        return None

    def worker_count(self, key: Key) -> int:
        return sum(
            1
            for r in self.prev.instances.values()
            if (r.cluster, r.node_type) == key
            and r.live
            and r.role is Role.WORKER
            and r.intent is Intent.RUNNING
        )

    def lives(self, end: float) -> list[cost.Life]:
        known = dict(cost.lives_from_ledger(read_ledger(self.fleet.ledger)))
        for record in self.fleet.controller.records().instances.values():
            life = cost.life_of(record)
            if life is not None:
                known[life.instance] = life
        return list(known.values())


def within(a: float, b: float) -> bool:
    """Within 1% (and a tenth of a cent)."""
    return math.isclose(a, b, rel_tol=0.01, abs_tol=0.001)


def _failed_under(
    records: Records, cluster: str, host: int, node_type: str | None, at: float
) -> str | None:
    """The image-and-env fingerprint the candidate whose failure blocklisted `host` ran: its
    request's, as placed (a candidate of the old image that fails just after the user changed
    it failed under the old one)."""
    on_host = [
        r
        for r in records.instances.values()
        if r.cluster == cluster
        and r.host_id == host
        and r.node_type == node_type
        and r.created_at <= at
        and r.vast_id is not None
    ]
    if not on_host:
        return None
    ended_then = [r for r in on_host if r.ended_at is not None and abs(r.ended_at - at) <= 1.0]
    latest = max(ended_then or on_host, key=lambda r: r.created_at)
    request = records.requests.get(latest.request_id or "")
    return request.fingerprint if request is not None else None
