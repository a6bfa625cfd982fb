"""The checks of `fleetsim.invariants`, one function per kind of fact (see its docstring for
the invariants' definitions). Each reads the `Judge`'s story and flags a `Violation` once per
subject."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleetsim.harness import START
from fleetsim.invariants import (
    DELIBERATE,
    MIN_SERVICE,
    SLACK,
    WATCHDOGS,
    Judge,
    Key,
    Moment,
    clock,
    line,
    within,
)
from reconciler.model import cost
from reconciler.model.labels import parse_label
from reconciler.model.records import InstanceRecord, Intent, Records
from vastsim.instances import Instance

ORPHAN_SWEEP = 300.0
RELEASED = re.compile(r"request (\S+) is (released|failed)")


# Ends of a lost worker the seeds ask for whatever its mark: `down`, a prune, and what vast's own
# listing proves (gone from the list for 60 s, `exited`: the first seed's provider endings; the
# lost mark is about the path to the machine, not about a machine vast no longer runs).
ALLOWED_WHILE_LOST = frozenset({"down", "removed_from_spec", "missing_from_listing", "exited"})
# Ends of a pinned machine that are no new decision to end it: `down`; what vast's listing
# proves (its container exited, or vast no longer lists it: Ray's work there is a reading that
# has not caught up); and a destroy sent again (its first decision was judged when it was made:
# seed 16, an exited container's resent destroy while Ray still said work was on it).
ALLOWED_WHILE_PINNED = frozenset({"down", "missing_from_listing", "exited", "finish_destroy"})


def _destroy(entry: Mapping[str, Any]) -> bool:
    data = entry.get("data") or {}
    return entry["kind"] == "decision" and data.get("action") == "destroy"


def entry(judge: Judge, e: dict[str, Any], records: Records) -> None:
    """One new ledger line: rentals (8), enrollments, endings decided (4, 5), stops (2, 3, 5)."""
    story, data = judge.story, e.get("data") or {}
    vast_id = e.get("instance")
    if e["kind"] == "outcome" and data.get("action") == "rent" and data.get("outcome") == "ok":
        _rented(judge, e, records)
    elif e["class"] == "enrolled" and e["kind"] == "decision" and vast_id is not None:
        key = story.nodes.get(e.get("record") or "")
        if key is not None:
            story.enrolled.setdefault(vast_id, ((e["time"], float(e["seq"])), key))
            judge._canary_dirty = True
    ends = _destroy(e) or (e["class"] == "worker_report" and bool(data.get("trusted")))
    if vast_id is not None and vast_id not in story.cause and ends:
        story.cause[vast_id] = e
    if _destroy(e):
        _decided_end(judge, e, records)
    elif e["kind"] == "decision" and e["class"] == "idle_stop" and data.get("action") == "stop":
        _stopped(judge, e, records)


def _rented(judge: Judge, e: dict[str, Any], records: Records) -> None:
    story = judge.story
    rid = e.get("record") or ""
    record = records.instances.get(rid)
    key = story.nodes.get(rid)
    if record is None or key is None:
        return
    request = records.requests.get(record.request_id or "")
    digest = request.fingerprint if request is not None else None
    story.rentals.setdefault(key, []).append(((e["time"], float(e["seq"])), rid, digest))
    judge._canary_dirty = True
    host = int((e.get("data") or {}).get("host_id") or -1)
    judge.checks += 1
    for (at, reason), (block, then) in sorted(story.blocks.get((key[0], host), {}).items()):
        same = then == story.digest_at(key, e["time"]) or reason == "network"
        if block.node_type == key[1] and at <= e["time"] < block.until and same:
            what = (
                f"{key[0]}/{key[1]} rented host {host} ({rid}, instance {e.get('instance')}) "
                f"that its own failure blocklisted at {clock(at)} ({reason}) until "
                f"{clock(block.until)}, under the same configuration"
            )
            judge.flag(8, e["time"], what, f"{key}:{host}:{at}", story.about(rid, None))
            return


def _decided_end(judge: Judge, e: dict[str, Any], records: Records) -> None:
    """A destroy decision: of a lost worker (4), of a pinned machine (5), by a request watchdog."""
    judge.checks += 1
    rid, vast_id, cls = e.get("record"), e.get("instance"), e["class"]
    before = judge.prev.instances.get(rid or "")
    after = records.instances.get(rid or "")
    lines = judge.story.about(rid, vast_id)
    if cls in WATCHDOGS and vast_id is not None and not judge.play.faulted(vast_id, e["time"]):
        judge.flag(
            2, e["time"], f"request watchdog {cls} ended {rid}", f"w{rid}", lines, vast_id=vast_id
        )
    if after is not None and after.held(e["time"]) and cls not in ALLOWED_WHILE_PINNED:
        by = after.pinned_by or "Ray's work on it"
        what = f"{rid} (instance {vast_id}) ended by {cls} while pinned ({by})"
        judge.flag(5, e["time"], what, f"p{rid}", lines, vast_id=vast_id)
    lost = cls == "lost" or (before is not None and before.lost)
    if lost and cls not in ALLOWED_WHILE_LOST and not _silent(judge, before, e):
        what = f"{rid} (instance {vast_id}) ended by {cls} while marked lost"
        judge.flag(4, e["time"], what, f"l{rid}", lines, vast_id=vast_id)


def _silent(judge: Judge, before: InstanceRecord | None, e: dict[str, Any]) -> bool:
    """A went-silent destroy at its threshold (the worker's own reports that old)."""
    if e["class"] != "went_silent" or before is None:
        return False
    spec = judge.fleet.controller.specs.get(before.cluster)
    limit = spec.watchdogs.went_silent_after_seconds if spec is not None else 300
    last = before.self_report_at or before.enrolled_at or before.created_at
    return bool(e["time"] - last >= limit - 15)


def _stopped(judge: Judge, e: dict[str, Any], records: Records) -> None:
    """A money-chain stop: of a pinned machine (5), of a busy worker (2); its disk watched (3)."""
    judge.checks += 1
    rid, vast_id, at = e.get("record") or "", e.get("instance"), e["time"]
    record = records.instances.get(rid)
    if record is None or vast_id is None:
        return
    lines = judge.story.about(rid, vast_id)
    if record.held(at):
        judge.flag(
            5,
            at,
            f"{rid} (instance {vast_id}) stopped while pinned",
            f"s{rid}",
            lines,
            vast_id=vast_id,
        )
    spec = judge.fleet.controller.specs.get(record.cluster)
    stop_after = spec.watchdogs.idle_stop_after_seconds if spec is not None else 600
    destroy_after = spec.watchdogs.idle_destroy_after_seconds if spec is not None else 1800
    work = judge.play.works.get(vast_id)
    if work is not None and not judge.play.faulted(vast_id, at):
        quiet = work.quiet_since(at - 60)
        if quiet is None or quiet > at - stop_after + SLACK:
            busy = "busy" if quiet is None else f"quiet only since {clock(quiet)}"
            what = f"worker {vast_id} ({rid}) stopped by the money chain while {busy}"
            judge.flag(2, at, what, f"b{rid}:{at}", lines, vast_id=vast_id)
    due = record.destroy_due_at or at + destroy_after - stop_after
    judge.story.stops[vast_id] = (at, due, rid)


def stops(judge: Judge, records: Records) -> None:
    """A stopped machine started again is no longer a deliberate stop's (3)."""
    for vast_id, (_, _, rid) in list(judge.story.stops.items()):
        record = records.instances.get(rid)
        if record is not None and record.live and record.intent is Intent.RUNNING:
            del judge.story.stops[vast_id]


def ended(judge: Judge, vast_id: int, now: float, records: Records) -> None:
    """An instance of ours left vast: a healthy worker (2), a deliberate stop's disk (3)."""
    judge.checks += 1
    story, play = judge.story, judge.play
    record = judge.record_of(vast_id, records)
    cause = story.cause.get(vast_id)
    cls = cause["class"] if cause is not None else "vanished"
    if cause is not None and cls == "worker_report":
        cls = f"worker_report:{(cause.get('data') or {}).get('reason')}"
    lines = story.about(record.id if record else None, vast_id)
    faulted = play.faulted(vast_id, now)
    if vast_id in story.stops:
        at, due, rid = story.stops.pop(vast_id)
        if now < due - 1 and not faulted and cls not in ("down", "removed_from_spec"):
            what = (
                f"instance {vast_id} ({rid}) stopped deliberately at {clock(at)} left vast at "
                f"{clock(now)} by {cls}, before its destroy timer ({clock(due)}): its disk is lost"
            )
            judge.flag(3, now, what, f"d{vast_id}", lines, vast_id=vast_id)
    if record is None or faulted:
        return
    if vast_id not in story.enrolled:
        _candidate(judge, vast_id, now=now, record=record, cause=cause, lines=lines)
        return
    before = judge.prev.instances.get(record.id, record)
    if before.lost or before.held(now) or _legit(judge, cls, before, vast_id, now):
        return
    what = (
        f"worker {vast_id} ({record.id}, {record.cluster}/{record.node_type}) ended by {cls} "
        "with nothing wrong with its container, host or instance"
    )
    judge.flag(2, now, what, f"h{vast_id}", lines, vast_id=vast_id)


def _legit(judge: Judge, cls: str, record: InstanceRecord, vast_id: int, now: float) -> bool:
    key = (record.cluster, record.node_type)
    spec = judge.fleet.controller.specs.get(record.cluster)
    if cls in ("down", "start_stuck"):
        return True
    if cls == "removed_from_spec":
        return record.cluster in judge.story.removed
    if cls == "scale_down":
        node = spec.node_types.get(record.node_type) if spec is not None else None
        return node is None or judge.worker_count(key) > node.max_workers
    if cls == "idle_destroy":
        if record.intent is Intent.STOPPED:
            return True
        work = judge.play.works.get(vast_id)
        stop_after = spec.watchdogs.idle_stop_after_seconds if spec is not None else 600
        quiet = work.quiet_since(now) if work is not None else None
        return quiet is not None and quiet <= now - stop_after + SLACK
    return False


def _candidate(
    judge: Judge,
    vast_id: int,
    *,
    now: float,
    record: InstanceRecord,
    cause: Mapping[str, Any] | None,
    lines: tuple[str, ...],
) -> None:
    """A healthy candidate ended as the leftover of a request a request watchdog ended (2)."""
    if cause is None or cause["class"] != "extra_candidate":
        return
    found = RELEASED.search(cause["message"])
    request = judge.prev.requests.get(found.group(1)) if found else None
    if request is not None and request.ended_reason in WATCHDOGS:
        what = (
            f"candidate {vast_id} ({record.id}) ended as the leftover of request {request.id}, "
            f"which the request watchdog {request.ended_reason} ended"
        )
        judge.flag(2, now, what, f"c{vast_id}", lines, vast_id=vast_id)


def billing(judge: Judge, now: float, records: Records, instances: Mapping[int, Instance]) -> None:
    """Every billing instance of ours has a live record, or is an orphan in its grace (6)."""
    by_vast = {r.vast_id for r in records.instances.values() if r.live and r.vast_id is not None}
    lineage8 = judge.fleet.controller.journal.lineage[:8]
    for vast_id, inst in instances.items():
        info = parse_label(inst.label)
        if info is None or info.lineage8 != lineage8:
            continue
        judge.checks += 1
        named = records.instances.get(info.record_id)
        if vast_id in by_vast or (named is not None and named.live and named.vast_id is None):
            judge.story.unrecorded.pop(vast_id, None)
            continue
        since = judge.story.unrecorded.setdefault(vast_id, now)
        spec = judge.fleet.controller.specs.get(info.cluster)
        grace = spec.watchdogs.orphan_grace_seconds if spec is not None else 600
        if now - since > grace + ORPHAN_SWEEP + SLACK:
            what = (
                f"instance {vast_id} ({inst.label}, {inst.actual_status}) bills with no live "
                f"record since {clock(since)}"
            )
            judge.flag(
                6,
                now,
                what,
                f"o{vast_id}",
                judge.story.about(info.record_id, vast_id),
                vast_id=vast_id,
            )


def revoked(judge: Judge, now: float, records: Records) -> None:
    """A lost worker's certificate is not revoked while its record lives (4)."""
    gone = set(records.revoked_certs)
    for r in records.instances.values():
        if r.live and r.lost and r.cert_serial is not None and r.cert_serial in gone:
            what = f"{r.id} (instance {r.vast_id}) is lost and its certificate was revoked"
            judge.flag(
                4, now, what, f"r{r.id}", judge.story.about(r.id, r.vast_id), vast_id=r.vast_id
            )


# --- 1: the canary rule ----------------------------------------------------------------------


def canary(judge: Judge, now: float, *, final: bool) -> None:
    """Rentals of each canary cycle against `slots x factor` (see the module docstring)."""
    story = judge.story
    for key, rentals in story.rentals.items():
        judge.checks += 1
        bound = judge.play.bound(key)
        if bound is None:
            continue
        for start, end in _canary_cycles(judge, key):
            inside = [
                (m, rid)
                for m, rid, digest in rentals
                if start <= m < end and digest in (None, story.digest_at(key, m[0]))
            ]
            if len(inside) > bound:
                (t, _), rid = inside[bound]
                what = (
                    f"{key[0]}/{key[1]} rented {len(inside)} in the breaker cycle from "
                    f"{clock(start[0])} (bound {bound} = breaker.slots x candidate_factor); "
                    f"rental {bound + 1} was {rid}"
                )
                lines = tuple(
                    line(e)
                    for e in story.entries
                    if start <= (e["time"], e["seq"]) < end
                    and e["class"] in ("scale_up", "breaker_open", "slots_no_worker")
                    and e["kind"] != "call"
                    and e["cluster"] == key[0]
                )
                judge.flag(1, t, what, f"{key}:{start}", lines[-12:])


def _canary_cycles(judge: Judge, key: Key) -> list[tuple[Moment, Moment]]:
    story = judge.story
    cuts = [(m, "canary") for m in story.openings.get(key, [])]
    cuts += [(m, "canary") for m in story.changes.get(key, [])]
    for vast_id, (at, node) in story.enrolled.items():
        if node == key and _served(judge, vast_id, at[0]):
            cuts.append((at, "healthy"))
            # and again where it proved the configuration: a worker that enrolled before an
            # opening and serves its `MIN_SERVICE` after it ends that canary cycle (the
            # controller's proof, DESIGN.md 11: "a worker that serves ... resets it"; seed 107)
            cuts.append(((_proved_at(judge, vast_id, at[0]), at[1]), "healthy"))
    cuts.sort()
    cycles: list[tuple[Moment, Moment]] = []
    start: Moment = (START, 0.0)
    kind = "canary"
    for at, what in [*cuts, ((float("inf"), 0.0), "end")]:
        if kind == "canary" and at > start:
            cycles.append((start, at))
        start, kind = at, what
    return cycles


def _proved_at(judge: Judge, vast_id: int, enrolled: float) -> float:
    """When a worker that served proved it: `MIN_SERVICE` after enrolling, or at its deliberate
    end before that."""
    end = judge.story.ended.get(vast_id)
    proof = enrolled + MIN_SERVICE
    return proof if end is None else min(proof, end)


def _served(judge: Judge, vast_id: int, enrolled: float) -> bool:
    """It served (or may still: it is up), or a deliberate decision ended it."""
    end = judge.story.ended.get(vast_id)
    if end is None or end - enrolled >= MIN_SERVICE:
        return True
    cause = judge.story.cause.get(vast_id)
    return cause is not None and cause["class"] in DELIBERATE


# --- 7: the bill -----------------------------------------------------------------------------


def cost_against_meter(judge: Judge, end: float) -> None:
    f = judge.fleet
    judge.checks += 1
    by_cluster = cost.group(cost.charges(judge.lives(end), since=None, until=end), "cluster")
    pending = set(judge.story.unrecorded)
    clusters = sorted({c for c, _ in judge.play.names()})
    for name in clusters:
        meter = sum(
            f.sim.meter.instance(v, at=end)
            for v in f.rentals(name)
            if v not in pending or _priced(judge, v)
        )
        dollars = by_cluster[name].dollars if name in by_cluster else 0.0
        if not within(dollars, meter):
            what = (
                f"cluster {name}: ray-vast cost says ${dollars:.4f}, vastsim's meter ${meter:.4f} "
                f"({(dollars - meter) / meter if meter else float('inf'):+.1%})"
            )
            judge.flag(7, end, what, name, ())


def _priced(judge: Judge, vast_id: int) -> bool:
    return any(e.get("instance") == vast_id and e["class"] == "orphan" for e in judge.story.entries)
