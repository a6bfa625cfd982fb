"""Raising an alert from the loop: the records, the ledger and the log in one hold of the lock.

Whether an alert is new or a repeat, and the alert itself, are `planning/alerts.py`'s; this is
the one place the loop writes one (a mass destroy held back, demand that fits no node type, a
spec that does not load).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from reconciler.applying.journal import Journal
from reconciler.model.records import Alert
from reconciler.planning import alerts
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.views.plan import alert_line


def raise_alert(
    journal: Journal, say: Callable[[str], None], concern: alerts.Concern, now: float
) -> None:
    """Keep the alert in the records (`status`), ledger and say it, unless it is a repeat."""
    with journal.lock:
        found = alerts.raised(journal.records(), concern, now)
        if found is None:
            return
        records, alert = found
        journal.save(records)
        journal.ledger.append(
            LedgerEvent(
                concern.cluster,
                LedgerKind.DETECTION,
                concern.cls,
                concern.message,
                record=concern.record,
            )
        )
        say_alerts(say, [alert])


def say_alerts(say: Callable[[str], None], raised: Iterable[Alert]) -> None:
    """Alerts are said in the log as well as kept for `status`."""
    for alert in raised:
        say(f"ALERT {alert_line(alert)}")
