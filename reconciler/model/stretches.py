"""The clocks of the bill: the stretches of an instance's life (quiet, stopped, dark), opened
and closed as the scanners, the executor, the head and the listings see it change.

An `InstanceRecord` keeps these stretches (`model/records.py` says what each one means); the bill
(`model/cost.py`) reads them. Here are the transitions only: each takes a record and returns it
with the stretch under way opened, moved or closed, so every writer of a stretch agrees on the
rules of the bill (what vast charges for, from when to when).
"""

from __future__ import annotations

from reconciler.model.evolve import evolve
from reconciler.model.records import InstanceRecord, Stretch

# Quiet stretches a record keeps one by one (older ones are folded into seconds).
QUIET_KEPT = 32


def open_since(stretches: tuple[Stretch, ...]) -> float | None:
    """When the stretch under way began (None: none is)."""
    last = stretches[-1] if stretches else None
    return last.start if last is not None and last.end is None else None


def went_quiet(record: InstanceRecord, now: float) -> InstanceRecord:
    """The idle scanner armed the money chain's timers: a quiet stretch begins."""
    if open_since(record.quiet) is not None:
        return record
    return evolve(record, quiet=(*record.quiet, Stretch(now)))


def traffic_again(record: InstanceRecord, now: float) -> InstanceRecord:
    """Traffic cleared the timers: the quiet stretch under way ends now (the oldest stretches
    beyond `QUIET_KEPT` are folded into seconds)."""
    since = open_since(record.quiet)
    if since is None:
        return record
    quiet = (*record.quiet[:-1], Stretch(since, max(since, now)))
    folded = record.quiet_folded
    while len(quiet) > QUIET_KEPT:
        oldest, quiet = quiet[0], quiet[1:]
        folded += (oldest.end if oldest.end is not None else oldest.start) - oldest.start
    return evolve(record, quiet=quiet, quiet_folded=folded)


def stopped_from(record: InstanceRecord, now: float) -> InstanceRecord:
    """vast bills only its storage from `now` (our stop call, or a listing showing it stopped)."""
    if open_since(record.stopped) is not None:
        return record
    return evolve(record, stopped=(*record.stopped, Stretch(now)))


def stop_heard(record: InstanceRecord, at: float) -> InstanceRecord:
    """The agent reported vast's TERM of our stop at `at`: vast carries a stop out seconds after
    the call (and bills the GPU until then), so the stopped stretch under way begins at the TERM,
    not at the call (the adversary's seeds 21 and 88: a worker stopped and started every three
    minutes for hours was priced 3 s a cycle short, 1% under the meter)."""
    since = open_since(record.stopped)
    if since is None or since >= at:
        return record
    return evolve(record, stopped=(*record.stopped[:-1], Stretch(at)))


def dark_from(record: InstanceRecord, since: float) -> InstanceRecord:
    """A listing shows it listed but not running, no stop of ours under way: vast bills its
    storage alone from `since` (the last listing that showed it running)."""
    if open_since(record.dark) is not None or open_since(record.stopped) is not None:
        return record
    return evolve(record, dark=(*record.dark, Stretch(since)))


def lit_again(record: InstanceRecord, now: float) -> InstanceRecord:
    """A listing shows it running again: the dark stretch under way ends."""
    since = open_since(record.dark)
    if since is None:
        return record
    return evolve(record, dark=(*record.dark[:-1], Stretch(since, max(since, now))))


def vanished_at(record: InstanceRecord, now: float) -> float:
    """When vast most likely stopped billing an instance that went away without a destroy of ours
    (its worker destroyed it itself, or vast ended it), found out at `now`. The head's doom of it
    (`ended_at`: the worker's report just before its own destroy) when no listing showed it
    after that; else halfway between the last listing that showed it and the first that did not
    (`missing_since`), where nothing better is known."""
    seen = record.provider_seen_at
    doomed = record.ended_at
    if doomed is not None and (seen is None or doomed >= seen):
        return min(doomed, now)
    low = seen if seen is not None else record.created_at
    high = min(record.missing_since if record.missing_since is not None else now, now)
    return low + max(0.0, high - low) / 2


def running_again(record: InstanceRecord, since: float, now: float) -> InstanceRecord:
    """A listing at `now` shows it running since `since` (vast's uptime): a stopped stretch under
    way ends then, and one that our start call ended is moved to then, unless a listing has shown
    it running since that call (vast billed storage until the instance ran again). Running since
    before the stretch began is a stop of ours vast has not carried out yet (it lands seconds
    after the call): the stretch stays open, from this listing on (the adversary's seed 7: each
    stop closed at its own start, and a worker stopped and started 25 times was priced as if it
    never stopped)."""
    last = record.stopped[-1] if record.stopped else None
    if last is None:
        return record
    if last.end is None and since < last.start:
        start = max(last.start, now)
        return evolve(record, stopped=(*record.stopped[:-1], Stretch(start)))
    if last.end is None:
        end = max(last.start, since)
    elif since > last.end and (record.provider_ok_at is None or record.provider_ok_at < last.end):
        end = since
    else:
        return record
    return evolve(record, stopped=(*record.stopped[:-1], Stretch(last.start, end)))
