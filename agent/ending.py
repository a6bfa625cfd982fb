"""How a candidate or worker ends: report, stop Ray, destroy the instance, and never exit.

The seed's rules, in order:
- report first: the reason goes to the head (`POST /report`), which keeps it in its log and the
  ledger; vast keeps no container log after a destroy, so this is the only record. The agent
  waits up to `report_wait_seconds` for an answer, then goes on regardless;
- stop Ray's process group (TERM, then KILL after a short grace), so the node leaves the cluster;
- destroy, never exit: `DELETE /api/v0/instances/<own id>/` with the instance's own key, retried
  every `self_destroy_retry_seconds` until vast confirms (200, or 404 / no_such_instance: already
  gone). A PID 1 that exits is restarted by vast and keeps billing, so after the confirmation the
  agent still does not exit: it waits for the container to be taken away, and asks again now and
  then in case the destroy did not take.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any, NoReturn

from agent import transport
from agent.config import Settings

GONE_ERRORS = frozenset({"no_such_instance", "not_found"})
# After vast confirmed, ask again this many retry intervals later (a destroy that did not take).
CONFIRMED_BACKOFF = 12


def disarm_signals(log: Callable[[str], None]) -> None:
    """From here on TERM, INT and HUP change nothing: the ending is already under way."""

    def note(signum: int, frame: Any) -> None:
        log(f"signal {signal.Signals(signum).name} while ending: ignored")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, note)


def send_report(
    settings: Settings,
    report: dict[str, Any],
    *,
    wait: float,
    log: Callable[[str], None],
) -> bool:
    """Try to hand the report to the head for up to `wait` seconds; True if it answered."""
    deadline = time.monotonic() + wait
    context = transport.pinned_context(settings.ca_pem)
    while True:
        left = deadline - time.monotonic()
        try:
            reply = transport.request(
                f"{settings.enroll_url}/report",
                method="POST",
                body=report,
                context=context,
                timeout=max(0.2, min(left, 5.0)),
            )
        except transport.TransportError as exc:
            log(f"report not delivered: {exc}")
        else:
            if reply.status < 500:
                log(f"report delivered ({reply.status})")
                return reply.status == 200
            log(f"report refused: {reply.describe()}")
        if time.monotonic() + 0.2 >= deadline:
            log("no answer to the report in time; destroying anyway")
            return False
        time.sleep(0.2)


def destroy_once(settings: Settings, *, timeout: float) -> tuple[bool, str]:
    """One destroy call: (vast confirmed it, what happened)."""
    try:
        reply = transport.request(
            settings.destroy_url,
            method="DELETE",
            body={},
            headers={"Authorization": f"Bearer {settings.instance_key}"},
            timeout=timeout,
        )
    except transport.TransportError as exc:
        return False, f"no answer: {exc}"
    if reply.status == 200:
        success = not isinstance(reply.doc, dict) or reply.doc.get("success", True) is not False
        return success, f"200 {reply.doc}"
    if reply.status == 404 or reply.error() in GONE_ERRORS:
        return True, f"already gone ({reply.status})"
    return False, reply.describe()


def destroy_forever(settings: Settings, *, log: Callable[[str], None]) -> NoReturn:
    """Destroy this instance, retrying until vast confirms; then wait to be taken away."""
    retry = settings.self_destroy_retry
    attempt = 0
    while True:
        attempt += 1
        confirmed, what = destroy_once(settings, timeout=max(1.0, min(retry * 2, 10.0)))
        log(f"self-destroy attempt {attempt}: {what}")
        time.sleep(retry * CONFIRMED_BACKOFF if confirmed else retry)


def end(
    settings: Settings,
    report: dict[str, Any],
    *,
    stop_ray: Callable[[], None],
    log: Callable[[str], None],
) -> NoReturn:
    """The one way out: report, stop Ray, destroy, never exit."""
    disarm_signals(log)
    log(f"ending: {report['reason']}: {report['detail']}")
    try:
        send_report(settings, report, wait=settings.report_wait, log=log)
    except Exception as exc:  # the destroy below must happen whatever the report did
        log(f"report failed: {exc!r}")
    try:
        stop_ray()
    except Exception as exc:
        log(f"stopping Ray failed: {exc!r}")
    destroy_forever(settings, log=log)
