"""The rent-loop breaker: rentals of a node type stay bounded whatever the fault (DESIGN.md 11).

The first seed counts the slots of a node type that end with no worker; three in a row pause
its launches for ten minutes, and an enrollment sets the count to 0. Composed with the rest of
the controller that left three rent loops with no end, and these rules close them:

- **The breaker never lifts a blocklist entry.** A fault that ends every slot in a row is often
  the cheap hosts' own (on vast the broken hosts are the cheap ones): lifting their entries
  rents them again after every pause. Entries and the count belong to the node type's
  configuration (`NodeType.digest`: image, env, disk, filters); when the user changes it, the
  entries a configuration fault explains (`timeout`, `boot`) made under the old one are lifted
  (they lie dormant, and hold again if the user goes back to it: `blocked`) and the breaker
  resets, while `network` entries keep their day (`reset_on_change`).
- **The canary rule.** While no worker of the current configuration has served
  `min_service_seconds`, or the count is above zero, at most `breaker.slots` slots are in
  flight at once: open slots and workers still inside their first `min_service_seconds`
  (`headroom`). Each slot rents at most `candidate_factor` candidates over its life, so a
  breaker cycle rents at most `slots x candidate_factor`, whatever the request's size. (The
  design says "until the configuration has enrolled a worker"; an enrollment that ends before
  `min_service_seconds` is by the next rule a slot with no worker, so the proof is a worker
  that served that long.)
- **Short lives count.** A worker that ends with its own failure report before it has served
  `min_service_seconds` leaves its slot "ended with no worker" (`observe_lives`): an image
  without `ray`, or a Ray head that is down, enrolls every candidate and ends every worker, and
  the seed's reset on enrollment would otherwise keep the count at 0 forever. The seed's reset
  stays for the slot count; short lives have their own count, set to 0 only by a worker that
  served `min_service_seconds`.
- **Openings in a row double the pause** (10, 20, 40 minutes, at most 2 hours, as Kubernetes'
  CrashLoopBackOff), and the second one alerts a person; a worker that serves
  `min_service_seconds`, or a change of the configuration, resets it.
"""

from __future__ import annotations

from dataclasses import replace

from reconciler.model.plan import Action, ActionKind
from reconciler.model.records import BlockEntry, BreakerState, InstanceRecord, Intent, Role
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.nets.detection import Detection
from reconciler.planning.draft import Draft

MAX_PAUSE_SECONDS = 7200.0
# Blocklist reasons a fault of the configuration explains (an image that never enrolls, a
# pull that never ends, a container that never boots): lifted when the configuration changes.
CONFIG_REASONS = frozenset({"timeout", "boot"})
# The ends of a worker that are decisions of ours, not failures of its configuration.
DELIBERATE = frozenset({"scale_down", "idle_destroy", "idle_stop", "removed_from_spec", "down"})
SERVED = "served"
SHORT = "short"


def count_empty_slots(draft: Draft, spec: ClusterSpec, node_type: str, empty: int) -> None:
    """`empty` slots of a node type ended with no worker (a machine's fault): count them, and
    open the breaker when the count reaches `breaker.slots`."""
    state = draft.breaker(spec.name, node_type)
    since = state.since if state.since is not None and state.count else draft.now
    counted = replace(
        state,
        consecutive_empty=state.consecutive_empty + empty,
        cycle_failed=state.cycle_failed + empty,
        since=since,
    )
    _settle(draft, spec, node_type, counted)


def _settle(draft: Draft, spec: ClusterSpec, node_type: str, state: BreakerState) -> None:
    """Keep the new count, or open the breaker when it reaches `breaker.slots`, or when every
    slot of a canary cycle ended with no worker (an enrollment resets the seed's count, not
    the cycle's)."""
    failed = max(state.count, 0 if state.proven else state.cycle_failed)
    if failed < spec.breaker.slots:
        draft.set_breaker(spec.name, node_type, state)
        return
    openings = state.openings + 1
    pause = min(MAX_PAUSE_SECONDS, spec.breaker.pause_seconds * 2.0 ** (openings - 1))
    until = draft.now + pause
    why = (
        f"{failed} slots in a row ended with no worker"
        + (f" ({state.short_lives} of them workers that ended early)" if state.short_lives else "")
        + f"; launches paused for {pause / 60:.0f} min"
        + (f" (opening {openings} in a row with no serving worker)" if openings > 1 else "")
    )
    draft.set_breaker(
        spec.name,
        node_type,
        replace(
            state,
            consecutive_empty=0,
            short_lives=0,
            proven=False,
            openings=openings,
            paused_until=until,
            since=None,
            cycle_from=draft.now,
            cycle_failed=0,
            reason=why,
        ),
    )
    draft.add(
        Action(ActionKind.PAUSE, spec.name, "breaker_open", why, node_type=node_type, until=until)
    )
    if openings >= 2:
        detail = (
            f"node type {node_type}: the breaker opened {openings} times in a row and no worker "
            f"served in between ({why}); look at its image, env and offers"
        )
        draft.alert(spec.name, Detection(f"{spec.name}/{node_type}", "breaker_repeated", detail))


def reset_on_change(draft: Draft, spec: ClusterSpec, node_type: NodeType) -> None:
    """Bind the breaker to the node type's configuration as it is now; a change of it resets
    the breaker (count, pause, doubling, proof) and lifts the entries a configuration fault
    explains that were made under the old one."""
    state = draft.breaker(spec.name, node_type.name)
    digest = node_type.digest
    if state.digest == digest:
        return
    if state.digest is None:
        draft.set_breaker(spec.name, node_type.name, replace(state, digest=digest))
        return
    fresh = BreakerState(halt=state.halt, digest=digest, cycle_from=draft.now)
    draft.set_breaker(spec.name, node_type.name, fresh)
    entries = draft.blocklist.get(spec.name, {})
    lifted = [h for h, e in entries.items() if e.until > draft.now and _dormant(e, node_type)]
    why = (
        f"node type {node_type.name}: its configuration changed (image, env, disk or filters): "
        "the breaker is reset"
    )
    if lifted:
        why += f" and {len(lifted)} host(s) it blocklisted for timeouts or boots are lifted"
    key = f"{spec.name}/{node_type.name}"
    draft.detections.append(Detection(key, "breaker_reset", why, cluster=spec.name))
    draft.note("breaker_reset", why, key)


def blocked(draft: Draft, cluster: str, node_type: NodeType) -> dict[int, BlockEntry]:
    """The hosts a node type skips now: every entry in force, but for those a fault of another
    configuration of this node type explains (they hold again if the user goes back to it:
    found by the adversary, seed 25, an image changed and changed back re-rented the hosts
    that had timed out under it)."""
    entries = draft.blocklist.get(cluster, {})
    return {
        host: entry
        for host, entry in entries.items()
        if entry.until > draft.now and not _dormant(entry, node_type)
    }


def _dormant(entry: BlockEntry, node_type: NodeType) -> bool:
    """An entry of this node type that a fault of another configuration explains."""
    return (
        entry.node_type == node_type.name
        and entry.reason in CONFIG_REASONS
        and entry.digest is not None
        and not entry.explains(node_type.digest)
    )


def observe_lives(draft: Draft, spec: ClusterSpec, node_type: NodeType) -> None:
    """Each worker of the current configuration once: one that served `min_service_seconds`
    proves it (short lives and openings back to 0, the canary lifted), and so does one whose
    Ray ran and that something else ended (no failure report of its own); one that ended
    before that with its own failure report, or before its Ray ever ran, is a slot with no
    worker."""
    digest = node_type.digest
    served_for = spec.breaker.min_service_seconds
    for record in draft.of_node_type(spec.name, node_type.name):
        if (
            record.role is not Role.WORKER
            or record.breaker_mark is not None
            or _digest_of(draft, record) != digest
        ):
            continue
        ended = not _running(record)
        if _served(record, draft.now) >= served_for or (
            ended and record.serving_at is not None and record.ended_reason in DELIBERATE
        ):
            # it served that long, or its Ray ran and a decision of ours ended it (scale-down,
            # the money chain, a prune, `down`): the configuration works, and a canary budget
            # spent on it must not be lost for good (else no slot is ever let out again). Any
            # other early end is a failure: a worker vast loses, or that goes silent, within
            # minutes every time is a rent loop too (the adversary, seed 79: such ends counted
            # as proof let 14 rentals into a cycle bounded at 6)
            draft.update(record, breaker_mark=SERVED)
            state = draft.breaker(spec.name, node_type.name)
            proof = replace(
                state, short_lives=0, openings=0, proven=True, cycle_from=draft.now, cycle_failed=0
            )
            draft.set_breaker(spec.name, node_type.name, proof)
        elif ended:
            draft.update(record, breaker_mark=SHORT)
            state = draft.breaker(spec.name, node_type.name)
            why = (
                f"{record.id} ended ({record.reported or record.ended_reason}) after "
                f"{_served(record, draft.now):.0f}s "
                f"of service, before {served_for}s: its slot counts as one with no worker"
            )
            draft.detections.append(Detection(record.id, "short_life", why, record.vast_id))
            since = state.since if state.since is not None and state.count else draft.now
            _settle(
                draft,
                spec,
                node_type.name,
                replace(
                    state,
                    short_lives=state.short_lives + 1,
                    cycle_failed=state.cycle_failed + 1,
                    since=since,
                ),
            )


def headroom(draft: Draft, spec: ClusterSpec, node_type: NodeType, wanted: int, trying: int) -> int:
    """Slots a new request may try: all that are wanted once the configuration is proven and
    the count is 0. Before the proof, the canary rule: a cycle lets out `breaker.slots` slots
    in all (each rents at most `candidate_factor` over its life, so a cycle rents at most
    `slots x factor`), counted from the records, not from counters an enrollment resets. After
    it, during a streak: at most `breaker.slots - count` in flight (the `trying` open slots and
    the young workers already out)."""
    state = draft.breaker(spec.name, node_type.name)
    if not state.proven or state.digest != node_type.digest:
        return min(wanted, spec.breaker.slots - canary_slots(draft, spec, node_type, state))
    if state.count == 0:
        return wanted
    mine = draft.of_node_type(spec.name, node_type.name)
    young = sum(1 for r in mine if _young(draft, r, spec, node_type))
    return min(wanted, spec.breaker.slots - state.count - trying - young)


def canary_slots(draft: Draft, spec: ClusterSpec, node_type: NodeType, state: BreakerState) -> int:
    """The slots of the current canary cycle: those of the configuration's requests placed
    since the cycle began, but for the slots of a request a watchdog ended before anything was
    rented for it (it cost nothing and proves nothing)."""
    # a request's rentals are of its own cluster and node type
    mine = draft.of_node_type(spec.name, node_type.name)
    rented = {r.request_id for r in mine if r.vast_id is not None or r.live}
    since = state.cycle_from if state.cycle_from is not None else float("-inf")
    return sum(
        len(r.slots)
        for r in draft.index.requests_of(spec.name, node_type.name)
        if r.digest == node_type.digest
        and r.placed_at >= since
        and not (r.ended_by_watchdog and r.id not in rented)
    )


def _young(draft: Draft, record: InstanceRecord, spec: ClusterSpec, node_type: NodeType) -> bool:
    """A worker of this configuration that has not yet served `min_service_seconds` (still a
    canary: it may yet end as a slot with no worker)."""
    return (
        record.cluster == spec.name
        and record.node_type == node_type.name
        and record.role is Role.WORKER
        and _running(record)
        and record.breaker_mark is None
        and _digest_of(draft, record) == node_type.digest
    )


def _running(record: InstanceRecord) -> bool:
    return record.live and record.intent is not Intent.DESTROYED


def _served(record: InstanceRecord, now: float) -> float:
    """How long the worker has served (Ray running on it), up to its end."""
    if record.serving_at is None:
        return 0.0
    end = record.ended_at if record.ended_at is not None and not _running(record) else now
    return max(0.0, end - record.serving_at)


def _digest_of(draft: Draft, record: InstanceRecord) -> str | None:
    """The configuration a record was rented under (its request's), None when unknown."""
    request = draft.requests.get(record.request_id) if record.request_id else None
    return request.digest if request is not None else None
