"""`ray-vast status` said to a person, and the confirmation list of `ray-vast down`.

The view is `views/status.py`'s (the same data `--json` prints); each cluster is a line with its
$/h and cap, whether `down` holds it down, a row per instance with the flags of what holds it
(Ray work, a pin, the money chain's stop and destroy times), the foreign instances loudly, its
halted and paused node types and the alerts that wait for a person.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from reconciler.model.applied import HELD_DOWN
from reconciler.model.labels import parse_label
from reconciler.model.observed import Instance
from reconciler.views.status import ALERTS_SHOWN


def human(view: dict[str, Any]) -> str:
    now = float(view["generated_at"])
    lines = []
    if view["listing_error"]:
        lines.append(f"Warning: vast's listing is unknown ({view['listing_error']})")
    for cluster in view["clusters"]:
        cap = cluster["cap_dollars_per_hour"]
        cap_text = f" (cap {cap:.2f})" if cap is not None else ""
        lines.append(f"Cluster {cluster['name']}: ${cluster['dollars_per_hour']:.2f}/h{cap_text}")
        if cluster.get("ray"):
            ray = cluster["ray"]
            lines.append(f"  Ray {ray['address']}, dashboard and Jobs API {ray['dashboard']}")
        if cluster.get("scheduling") == "cheapest":
            lines.append("  scheduling: cheapest (a node type that fits is launched by its price)")
        for chosen in cluster.get("chosen", ()):
            lines.append(f"  {chosen['node_type']}: {chosen['why']}")
        if cluster.get("held_down_at") is not None:
            since = _clock_time(cluster["held_down_at"], now)
            lines.append(f"  held down by `ray-vast down` since {since}: {HELD_DOWN}")
        if not cluster["instances"]:
            lines.append("  no instances")
        for i in cluster["instances"]:
            flags = "".join(f" [{f}]" for f in (["lost"] if i["lost"] else []) + _holds(i, now))
            lines.append(
                f"  {i['record']:<8} {i['node_type']:<12} vast {i['vast_id']!s:<10} "
                f"{i['role']:<9} {i['phase']:<14} vast:{i['vast_status']!s:<10} "
                f"{_age(i['age_seconds']):>7}  ${i['dollars_per_hour']:.3f}/h{flags}"
            )
        for f in cluster["foreign_instances"]:
            lines.append(
                f"  ! instance {f['vast_id']} ({f['label']}, ${f['dollars_per_hour']:.2f}/h) "
                "belongs to another state: not managed here"
            )
        for breaker in cluster["breakers"]:
            lines += _halt_lines(breaker, now)
            lines += [_breaker_line(breaker, now)] if _breaker_worth(breaker) else []
        lines += _alert_lines(cluster["alerts"])
    lines.append(f"Total: ${view['dollars_per_hour']:.2f}/h")
    return "\n".join(lines) + "\n"


def _holds(instance: Mapping[str, Any], now: float) -> list[str]:
    """Why work holds a machine, as the row's flags: `pinned: ray work`, `pinned by alice until
    14:05 UTC`, `pinned by alice`; an ended pin is shown as ended (it holds nothing). A quiet
    worker shows when the money chain stops and destroys it (`quiet: stop 14:05 UTC, destroy
    14:25 UTC`; a stopped one only the destroy), so nobody has to guess why a machine is
    still billing or when it will end."""
    out = _money_chain(instance, now)
    if instance["pinned"]:
        out.append("pinned: ray work")
    by, until = instance.get("pinned_by"), instance.get("pinned_until")
    if by is not None:
        if until is None:
            out.append(f"pinned by {by}")
        elif until > now:
            out.append(f"pinned by {by} until {_clock_time(until, now)}")
        else:
            out.append(f"pin by {by} ended {_clock_time(until, now)}")
    return out


def _money_chain(instance: Mapping[str, Any], now: float) -> list[str]:
    stop, destroy = instance.get("stop_due_at"), instance.get("destroy_due_at")
    if destroy is None:
        return []
    if instance.get("intent") == "stopped" or instance.get("phase") in ("stopped", "stopping"):
        return [f"stopped: destroy {_clock_time(destroy, now)}"]
    if instance.get("kept_at_min_workers"):
        return ["quiet: kept by min_workers"]
    if stop is None:
        return [f"destroy {_clock_time(destroy, now)}"]
    return [f"quiet: stop {_clock_time(stop, now)}, destroy {_clock_time(destroy, now)}"]


def _breaker_worth(breaker: Mapping[str, Any]) -> bool:
    return bool(breaker["paused"] or breaker["consecutive_empty"] or breaker["short_lives"])


def _halt_lines(breaker: Mapping[str, Any], now: float) -> list[str]:
    halt = breaker["halt"]
    if halt is None:
        return []
    since = _clock_time(halt["at"], now)
    if not breaker["halted"]:
        return [
            f"  halt {breaker['node_type']}: its image or env changed; launches resume at the "
            f"next reconcile (halted since {since}: {halt['reason']})"
        ]
    return [
        f"  HALTED {breaker['node_type']}: no rentals since {since}, until its image or env "
        f"changes: {halt['reason']}"
    ]


def _breaker_line(breaker: Mapping[str, Any], now: float) -> str:
    limit = breaker["trips_after"]
    total = breaker["consecutive_empty"] + breaker["short_lives"]
    count = f"{total}" + (f" of {limit}" if limit is not None else "")
    early = (
        f" ({breaker['short_lives']} workers that ended early)" if breaker["short_lives"] else ""
    )
    if not breaker["paused"]:
        return (
            f"  breaker {breaker['node_type']}: {count} slots in a row ended with no worker{early}"
        )
    tripped = f"{limit} slots" if limit is not None else "the breaker's number of slots"
    why = breaker["reason"] or f"{tripped} in a row ended with no worker"
    return (
        f"  breaker {breaker['node_type']}: launches paused until "
        f"{_clock_time(breaker['paused_until'], now)}: {why}"
    )


def _alert_lines(alerts: Sequence[Mapping[str, Any]]) -> list[str]:
    shown = alerts[-ALERTS_SHOWN:]
    lines = []
    if len(alerts) > len(shown):
        older = len(alerts) - len(shown)
        lines.append(f"  ALERT ... {older} older alert(s) not shown (`ray-vast status --json`)")
    for a in shown:
        when = datetime.fromtimestamp(a["at"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        record = f" {a['record']}" if a["record"] else ""
        lines.append(f"  ALERT {when} {a['class']}{record}: {a['message']}")
    return lines


def _clock_time(epoch: float, now: float) -> str:
    """`14:05 UTC` on the same (UTC) day as `now`, else with the date."""
    moment = datetime.fromtimestamp(epoch, tz=UTC)
    today = datetime.fromtimestamp(now, tz=UTC).date()
    if moment.date() == today:
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def down_listing(cluster: str, targets: Sequence[Instance], lineage: str) -> str:
    if not targets:
        return f"No instance of {cluster} at vast.\n"
    lines = [f"ray-vast down {cluster} will destroy {len(targets)} instance(s):"]
    for instance in targets:
        info = parse_label(instance.label)
        other = info is not None and info.lineage8 != lineage[:8]
        lines.append(
            f"  - instance {instance.id} {instance.label} ({instance.actual_status}, "
            f"${instance.dph_total or 0.0:.3f}/h)" + ("  <- made by another state" if other else "")
        )
    total = sum(i.dph_total or 0.0 for i in targets)
    lines.append(f"$/h {total:.2f} -> 0.00")
    return "\n".join(lines) + "\n"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
