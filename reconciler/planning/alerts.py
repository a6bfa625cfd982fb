"""Alerts for a person: the one place an alert is built, and the one repeat window.

An alert joins the records (`status` shows it until it is acknowledged), the ledger and the log.
The planner's detections, the controller's own findings (a mass destroy held back, demand that
fits no node type, a Ray head that cannot be read) and the head's (a forged token, junk from an
agent) all raise alerts; they go through here so that "the same alert" means one thing and a
repeat is held back for one window: the same cluster, class and record (and, for alerts told
apart by their words, the same message) within `settings.ALERT_REPEAT_SECONDS` is not raised
again. The ledger still has every detection; the head counts the repeats it held back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler import settings
from reconciler.model.evolve import evolve
from reconciler.model.records import Alert, Records


@dataclass(frozen=True)
class Concern:
    """What should alert a person: the alert before it is raised (it has no time yet)."""

    cluster: str
    cls: str
    message: str
    record: str | None = None
    by_message: bool = False  # told apart from others of its class by its words


def _key(cluster: str, cls: str, record: str | None, message: str | None) -> tuple[object, ...]:
    return (cluster, cls, record, message)


def _key_of_alert(alert: Alert, by_message: bool) -> tuple[object, ...]:
    return _key(alert.cluster, alert.cls, alert.record, alert.message if by_message else None)


def _key_of(concern: Concern) -> tuple[object, ...]:
    message = concern.message if concern.by_message else None
    return _key(concern.cluster, concern.cls, concern.record, message)


def fresh(
    existing: Iterable[Alert],
    concerns: Iterable[Concern],
    now: float,
    *,
    window: float = settings.ALERT_REPEAT_SECONDS,
) -> tuple[list[Alert], list[Concern]]:
    """The alerts `concerns` raise at `now` against those already raised, and the repeats held
    back (the same alert within `window`, or twice among `concerns`)."""
    recent = [a for a in existing if now - a.at < window]
    seen = {_key_of_alert(a, by) for a in recent for by in (False, True)}
    out: list[Alert] = []
    repeats: list[Concern] = []
    for concern in concerns:
        if _key_of(concern) in seen:
            repeats.append(concern)
            continue
        alert = Alert(now, concern.cluster, concern.cls, concern.message, concern.record)
        seen |= {_key_of_alert(alert, by) for by in (False, True)}
        out.append(alert)
    return out, repeats


def raised(
    records: Records, concern: Concern, now: float, *, window: float = settings.ALERT_REPEAT_SECONDS
) -> tuple[Records, Alert] | None:
    """`records` with the alert `concern` raises at `now`, and the alert; None when it repeats
    one raised within `window`."""
    [*new], _ = fresh(records.alerts, [concern], now, window=window)
    if not new:
        return None
    return evolve(records, alerts=(*records.alerts, *new)), new[0]
