"""Plans for people (Terraform's conventions) and for machines (versioned JSON).

The human form prints a legend of only the symbols used, one block per action with its reason,
the offers chosen with their prices, what was skipped and why, loud warnings for instances of our
clusters that another state owns, and a summary line with the $/h before and after against the cap.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from reconciler.model.codec import encode
from reconciler.model.plan import FORMAT_VERSION, Action, ActionKind, Plan
from reconciler.model.records import Alert

SYMBOLS = {
    ActionKind.RENT: ("+", "rent"),
    ActionKind.DESTROY: ("-", "destroy"),
    ActionKind.STOP: ("~", "stop (disk kept)"),
    ActionKind.START: ("~", "start"),
    ActionKind.BLOCKLIST: ("!", "blocklist a host"),
    ActionKind.PAUSE: ("!", "pause launches"),
    ActionKind.MARK_LOST: ("?", "mark lost (no longer routed to)"),
    ActionKind.ADOPT: ("<=", "adopt"),
    ActionKind.FORGET: ("x", "forget a record"),
}
VERBS = {
    ActionKind.RENT: "will be rented",
    ActionKind.DESTROY: "will be destroyed",
    ActionKind.STOP: "will be stopped",
    ActionKind.START: "will be started",
    ActionKind.MARK_LOST: "will be marked lost",
    ActionKind.ADOPT: "will be adopted",
    ActionKind.FORGET: "will be forgotten",
}
SUMMARY_ORDER = (
    (ActionKind.RENT, "to rent"),
    (ActionKind.START, "to start"),
    (ActionKind.STOP, "to stop"),
    (ActionKind.DESTROY, "to destroy"),
    (ActionKind.BLOCKLIST, "to blocklist"),
    (ActionKind.PAUSE, "to pause"),
    (ActionKind.MARK_LOST, "to mark lost"),
)


def human(plan: Plan) -> str:
    lines: list[str] = []
    if plan.errored:
        lines += [f"Error: {e.text}" for e in plan.errors]
        return "\n".join(lines) + "\n"
    for warning in plan.warnings:
        lines += [f"Warning: {warning.text}", ""]
    if not plan.has_changes:
        lines.append("No changes. Your clusters match their specs.")
        lines += ["", *_cost_lines(plan)]
        return "\n".join(lines) + "\n"
    lines += [*_legend(plan), ""]
    for action in plan.actions:
        lines += [*_block(action), ""]
    if plan.skipped:
        lines.append("Offers skipped:")
        lines += [
            f"  {s.cluster}/{s.node_type} offer {s.offer_id} (host {s.host_id}, "
            f"${s.dph_total:.2f}/h): {s.why}"
            for s in plan.skipped
        ]
        lines.append("")
    if plan.alerts:
        lines += [f"Alert: {alert_line(a)}" for a in plan.alerts] + [""]
    if plan.notes:
        lines += [f"Note: {n.text}" for n in plan.notes] + [""]
    lines += _cost_lines(plan)
    lines.append(summary(plan))
    return "\n".join(lines) + "\n"


def summary(plan: Plan) -> str:
    counts = [f"{plan.count(kind)} {words}" for kind, words in SUMMARY_ORDER if plan.count(kind)]
    before = sum(c.before for c in plan.costs)
    after = sum(c.after for c in plan.costs)
    cap = sum(c.cap for c in plan.costs)
    changes = ", ".join(counts) if counts else "no changes"
    return f"Plan: {changes}. $/h {before:.2f} -> {after:.2f} (cap {cap:.2f})"


def _legend(plan: Plan) -> list[str]:
    used = []
    for action in plan.actions:
        entry = SYMBOLS[action.kind]
        if entry not in used:
            used.append(entry)
    return [
        "ray-vast will perform the following actions, shown with these symbols:",
        *[f"  {symbol} {meaning}" for symbol, meaning in used],
    ]


def _block(action: Action) -> list[str]:
    symbol = SYMBOLS[action.kind][0]
    who = _who(action)
    head = f"  # {who} {VERBS.get(action.kind, '')}".rstrip()
    if action.kind is ActionKind.BLOCKLIST:
        head = f"  # host {action.host_id} of {action.cluster} will be blocklisted"
    elif action.kind is ActionKind.PAUSE:
        head = f"  # launches of {action.cluster}/{action.node_type} will pause"
    lines = [
        head,
        f"    because: {action.reason}" + (f" ({action.detail})" if action.detail else ""),
    ]
    if action.offer is not None:
        o = action.offer
        gpus = f"{o.num_gpus}x {o.gpu_name}" if o.gpu_name else "no GPU"
        lines.append(
            f"  {symbol} offer {o.offer_id}: {gpus} on host {o.host_id}, machine {o.machine_id}, "
            f"${o.dph_total:.3f}/h"
            + (f", reliability {o.reliability:.3f}" if o.reliability is not None else "")
            + (f", {o.geolocation}" if o.geolocation else "")
        )
        lines.append(f"    label: {action.label}")
    elif action.dph_delta:
        sign = "-" if action.dph_delta < 0 else "+"
        lines.append(f"  {symbol} {sign}${abs(action.dph_delta):.3f}/h")
    return lines


def _who(action: Action) -> str:
    where = f"{action.cluster}/{action.node_type}" if action.node_type else action.cluster
    parts = [where]
    if action.record:
        parts.append(action.record)
    if action.vast_id is not None:
        parts.append(f"(vast {action.vast_id})")
    return " ".join(parts)


def _cost_lines(plan: Plan) -> list[str]:
    return [
        f"Cluster {c.cluster}: $/h {c.before:.2f} -> {c.after:.2f} (cap {c.cap:.2f})"
        for c in plan.costs
    ]


def as_json(plan: Plan) -> dict[str, Any]:
    """The public, versioned JSON form (records are state, not part of it)."""
    counts = Counter(a.kind.value for a in plan.actions)
    return {
        "format_version": FORMAT_VERSION,
        "created_at": plan.created_at,
        "lineage": plan.lineage,
        "serial": plan.serial,
        "listing_fingerprint": plan.listing_fingerprint,
        "errored": plan.errored,
        "has_changes": plan.has_changes,
        "errors": [d.text for d in plan.errors],
        "warnings": [d.text for d in plan.warnings],
        "notes": [d.text for d in plan.notes],
        "diagnostics": [d.to_json() for d in plan.diagnostics],
        "alerts": encode(plan.alerts),
        "summary": dict(sorted(counts.items())),
        "detections": encode(plan.detections),
        "actions": encode(plan.actions),
        "costs": encode(plan.costs),
        "skipped_offers": encode(plan.skipped),
        "foreign_instances": encode(plan.foreign),
    }


def alert_line(alert: Alert) -> str:
    """An alert in words, as the log and `plan` say it."""
    record = f" ({alert.record})" if alert.record else ""
    return f"{alert.cluster}: {alert.cls}: {alert.message}{record}"
