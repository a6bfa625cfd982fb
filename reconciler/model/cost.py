"""What the machines cost, and why: the accounting of `ray-vast cost` (pure).

vast bills per second, as its meter does (vastsim/billing.py): an instance's `dph_total` while
it runs; its storage alone (`storage_dph`) from its create until it first runs, while it is
stopped or otherwise not running; nothing once it is destroyed. Each record keeps the clocks of
those changes, set where its phase changes, and `life_of` reads them into a `Life`:

- the bill starts at the create call (`created_at`);
- the GPU's bill starts when it first ran: the earlier of its enrollment (the agent enrolls as
  its container starts) and the first listing that showed it running;
- it bills storage only over its `stopped` stretches (from our stop call, or the listing that
  showed vast stopped it, to our start call), and after the last listing that showed it running
  when a later one showed it listed but not running (offline, exited);
- the bill ends at `ended_at` (the confirmed destroy; for one that went away by itself, the best
  estimate `stretches.vanished_at` gives).

Every dollar has one cause:

| cause | what it is |
| --- | --- |
| serving | a worker serving (from when the head first saw Ray running on it) |
| idle | a worker quiet but kept: the idle scanner had armed the money chain's timers |
| booting | rented and not serving yet (a worker's start-up; a candidate still booting) |
| failed | the whole bill of an instance that ended without ever serving |
| extra_candidate | the whole bill of a candidate ended because other candidates filled the slots |
| orphan | an instance labelled ours that no record answered for, until the sweep ended it |
| stopped | storage while we kept it stopped (its disk kept) |

A record leaves the state a day after its instance ended (planning/retention.py); its `Life` is
kept in the ledger then (`instance_bill`, `bill_entry`), and an orphan's is read from the ledger
line of its destroy (`orphan_life`), so a window older than the state's memory is still priced.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from reconciler.model.codec import decode, encode
from reconciler.model.records import InstanceRecord, Intent, Phase, Role, Stretch

H = 3600.0
FORMAT_VERSION = "1.0"
BILL_CLASS = "instance_bill"  # the ledger line that keeps a pruned record's bill


class Cause(StrEnum):
    SERVING = "serving"
    IDLE = "idle"
    BOOTING = "booting"
    FAILED = "failed"
    EXTRA = "extra_candidate"
    ORPHAN = "orphan"
    STOPPED = "stopped"


CAUSES: tuple[Cause, ...] = tuple(Cause)
EXTRA_REASONS = ("extra_candidate", "late_candidate")


@dataclass(frozen=True)
class Life:
    """One instance's bill over time."""

    instance: str  # the record id, or `vast:<id>` for an orphan
    cluster: str
    node_type: str | None  # None: an orphan (no record says)
    vast_id: int | None
    dph_total: float  # $/h while it runs
    storage_dph: float  # $/h otherwise
    start: float  # vast bills from here
    end: float | None  # None: it still bills
    running_from: float | None  # its GPU first billed (None: it never ran)
    running_until: float | None  # its GPU bill ended here at the latest (None: no such limit)
    stopped: tuple[Stretch, ...] = ()
    dark: tuple[Stretch, ...] = ()  # listed, not running, no stop of ours: storage only
    serving_from: float | None = None
    quiet: tuple[Stretch, ...] = ()
    quiet_folded: float = 0.0  # seconds of quiet stretches before the first one in `quiet`
    fate: Cause | None = None  # the cause of its whole bill (None: by the stretch, see above)


@dataclass(frozen=True)
class Charge:
    """What one instance cost for one cause inside the window."""

    instance: str
    cluster: str
    node_type: str | None
    vast_id: int | None
    cause: Cause
    seconds: float
    dollars: float


def life_of(record: InstanceRecord) -> Life | None:
    """The bill of a record (None: vast never had the instance, so it billed nothing)."""
    if record.vast_id is None:
        return None
    ran = [
        t for t in (record.enrolled_at, record.ran_from or record.first_running_at) if t is not None
    ]
    serving = record.serving_at
    if serving is None and (record.exempt or record.phase is Phase.SERVING):
        # no agent: running is as far as serving can be seen; or serving in a state written
        # before `serving_at` was (from its enrollment, the nearest clock it has)
        serving = record.enrolled_at
    ended = not record.live or record.intent is Intent.DESTROYED
    fate = None
    if serving is None and ended:
        reason = record.ended_reason or ""
        extra = record.role is Role.CANDIDATE and any(r in reason for r in EXTRA_REASONS)
        fate = Cause.EXTRA if extra else Cause.FAILED
    return Life(
        instance=record.id,
        cluster=record.cluster,
        node_type=record.node_type,
        vast_id=record.vast_id,
        dph_total=record.dph_total,
        storage_dph=record.storage_dph,
        start=record.created_at,
        end=None if record.live else (record.ended_at or record.created_at),
        running_from=min(ran) if ran else None,
        running_until=_running_until(record),
        stopped=record.stopped,
        dark=record.dark,
        serving_from=serving,
        quiet=record.quiet,
        quiet_folded=record.quiet_folded,
        fate=fate,
    )


def _running_until(record: InstanceRecord) -> float | None:
    """The last listing that showed it running, when a later one showed it listed but not
    running and no stop of ours explains it (vast took its host offline, its container exited):
    vast billed storage from about then. A start of ours since resets it."""
    ok, seen = record.provider_ok_at, record.provider_seen_at
    if ok is None or seen is None or seen <= ok:
        return None
    last = record.stopped[-1] if record.stopped else None
    if last is not None and last.end is None:
        return None  # stopped: its stretch says it
    return max(ok, last.end) if last is not None and last.end is not None else ok


# --- the ledger's part ---------------------------------------------------------------------------


class LedgerLine(Protocol):
    """What the accounting reads of a ledger line (`reconciler.state.ledger.LedgerEntry`)."""

    @property
    def time(self) -> float: ...
    @property
    def cluster(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def class_(self) -> str: ...
    @property
    def record(self) -> str | None: ...
    @property
    def instance(self) -> int | None: ...
    @property
    def dph(self) -> float | None: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


def bill_entry(life: Life) -> dict[str, Any]:
    """The `data` of the ledger line that keeps a record's bill once the record is forgotten."""
    return {"format_version": FORMAT_VERSION, "life": encode(life)}


def lives_from_ledger(lines: Iterable[LedgerLine]) -> dict[str, Life]:
    """The bills the ledger keeps: records the state has forgotten (`instance_bill`) and
    orphans (the destroy of an instance no record answered for), by instance."""
    found: dict[str, Life] = {}
    for line in lines:
        life: Life | None = None
        if line.class_ == BILL_CLASS and isinstance(line.data.get("life"), dict):
            try:
                life = decode(Life, line.data["life"])
            except (TypeError, ValueError, KeyError):
                life = None
        else:
            life = orphan_life(line)
        if life is not None:
            found[life.instance] = life
    return found


def orphan_life(line: LedgerLine) -> Life | None:
    """An orphan's bill, from the ledger line of its destroy: from when we first saw it to the
    destroy, at the $/h the listing gave (vast may have billed it before we saw it: a crash
    between its create and the save of its record)."""
    data = line.data
    seen = data.get("first_seen")
    if (
        str(line.kind) != "outcome"
        or data.get("action") != "destroy"
        or data.get("outcome") != "ok"
        or line.record is not None
        or line.instance is None
        or not isinstance(seen, int | float)
    ):
        return None
    dph = abs(line.dph or 0.0)
    return Life(
        instance=f"vast:{line.instance}",
        cluster=line.cluster,
        node_type=None,
        vast_id=line.instance,
        dph_total=dph,
        storage_dph=dph,
        start=float(seen),
        end=line.time,
        running_from=float(seen),
        running_until=None,
        fate=Cause.ORPHAN,
    )


# --- the bill --------------------------------------------------------------------------------


def charges(lives: Iterable[Life], *, since: float | None, until: float) -> list[Charge]:
    """What each instance cost for each cause between `since` (None: from its start) and
    `until`."""
    out: list[Charge] = []
    for life in lives:
        out += _charges(life, since, until)
    return out


def _charges(life: Life, since: float | None, until: float) -> list[Charge]:
    lo = life.start if since is None else max(life.start, since)
    hi = until if life.end is None else min(life.end, until)
    if hi <= lo:
        return []
    cuts = {lo, hi}
    for t in (life.running_from, life.running_until, life.serving_from):
        if t is not None:
            cuts.add(t)
    for stretch in (*life.stopped, *life.quiet, *life.dark):
        cuts.add(stretch.start)
        if stretch.end is not None:
            cuts.add(stretch.end)
    points = sorted(t for t in cuts if lo <= t <= hi)
    seconds: dict[Cause, float] = {}
    dollars: dict[Cause, list[float]] = {}
    for a, b in itertools.pairwise(points):
        if b <= a:
            continue
        middle = (a + b) / 2
        cause = _cause(life, middle)
        rate = life.dph_total if _running(life, middle) else life.storage_dph
        seconds[cause] = seconds.get(cause, 0.0) + (b - a)
        dollars.setdefault(cause, []).append((b - a) * rate / H)
    totals = {cause: math.fsum(parts) for cause, parts in dollars.items()}
    _fold_quiet(life, lo, hi, seconds, totals)
    return [
        Charge(
            life.instance,
            life.cluster,
            life.node_type,
            life.vast_id,
            cause,
            seconds[cause],
            totals[cause],
        )
        for cause in CAUSES
        if cause in seconds
    ]


def _within(stretches: tuple[Stretch, ...], t: float) -> bool:
    return any(s.start <= t < (math.inf if s.end is None else s.end) for s in stretches)


def _running(life: Life, t: float) -> bool:
    if life.running_from is None or t < life.running_from:
        return False
    if life.running_until is not None and t >= life.running_until:
        return False
    return not _within(life.stopped, t) and not _within(life.dark, t)


def _cause(life: Life, t: float) -> Cause:
    if life.fate is not None:
        return life.fate
    if _within(life.stopped, t):
        return Cause.STOPPED
    if life.serving_from is None or t < life.serving_from:
        return Cause.BOOTING
    if _within(life.quiet, t):
        return Cause.IDLE
    return Cause.SERVING


def _fold_quiet(
    life: Life, lo: float, hi: float, seconds: dict[Cause, float], dollars: dict[Cause, float]
) -> None:
    """Quiet seconds folded out of the record count as idle, spread evenly over the time they
    were in (from serving to the first stretch kept); they are taken from serving."""
    if life.quiet_folded <= 0 or life.serving_from is None or life.fate is not None:
        return
    first = life.quiet[0].start if life.quiet else (life.end or hi)
    span = first - life.serving_from
    if span <= 0:
        return
    share = max(0.0, min(hi, first) - max(lo, life.serving_from)) / span
    moved = min(life.quiet_folded * share, seconds.get(Cause.SERVING, 0.0))
    if moved <= 0:
        return
    served = seconds[Cause.SERVING]
    money = dollars[Cause.SERVING] * moved / served
    seconds[Cause.SERVING] = served - moved
    dollars[Cause.SERVING] -= money
    seconds[Cause.IDLE] = seconds.get(Cause.IDLE, 0.0) + moved
    dollars[Cause.IDLE] = dollars.get(Cause.IDLE, 0.0) + money


# --- totals ------------------------------------------------------------------------------------

BY_KEYS = ("cluster", "node-type", "cause", "instance")


@dataclass
class Totals:
    dollars: float = 0.0
    seconds: float = 0.0
    by_cause: dict[Cause, float] = field(default_factory=dict)


def group(found: Iterable[Charge], by: str) -> dict[str, Totals]:
    """The charges added up by cluster, node type, cause or instance (`BY_KEYS`), each group
    with its dollars by cause."""
    if by not in BY_KEYS:
        raise ValueError(f"--by {by!r}: one of {', '.join(BY_KEYS)}")
    parts: dict[str, dict[Cause, list[float]]] = {}
    seconds: dict[str, float] = {}
    for charge in found:
        key = _key(charge, by)
        parts.setdefault(key, {}).setdefault(charge.cause, []).append(charge.dollars)
        seconds[key] = seconds.get(key, 0.0) + charge.seconds
    out: dict[str, Totals] = {}
    order = [c.value for c in CAUSES if c.value in parts] if by == "cause" else sorted(parts)
    for key in order:
        by_cause = {c: math.fsum(parts[key][c]) for c in CAUSES if c in parts[key]}
        out[key] = Totals(math.fsum(by_cause.values()), seconds[key], by_cause)
    return out


def _key(charge: Charge, by: str) -> str:
    if by == "cluster":
        return charge.cluster
    if by == "node-type":
        return f"{charge.cluster}/{charge.node_type or '(orphan)'}"
    if by == "cause":
        return charge.cause.value
    return charge.instance
