"""The table `ray-vast simulate` prints, and its `--json` (versioned: `format_version` is
MAJOR.MINOR; a minor version only adds fields)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetsim.harness import START
from fleetsim.mix import FLEET_MIX, describe
from fleetsim.savings import Savings
from fleetsim.simulate import ClassRow, Config, Result, ratio_of
from reconciler.model.cost import CAUSES
from reconciler.views.cost import HEADINGS

# 1.1 added `scheduling` (what `scheduling: cheapest` would have saved; null: no cluster has
# a node type whose shape fits another's, so the scheduling chooses nothing).
FORMAT_VERSION = "1.1"
H = 3600.0


def minutes(seconds: float) -> str:
    """A latency in minutes (`never`: it never ended; `-`: none)."""
    if math.isnan(seconds):
        return "-"
    return "never" if math.isinf(seconds) else f"{seconds / 60:.1f}m"


def times(value: float) -> str:
    """A ratio to the floor."""
    return "inf" if math.isinf(value) else f"{value:.2f}x"


def human(result: Result, *, source: str, mix_source: str | None) -> str:
    config = result.config
    mix = "the fleet benchmark's" if mix_source is None else mix_source
    if config.mix == FLEET_MIX and mix_source is not None:
        mix += " (the fleet benchmark's)"
    lines = [
        f"simulate {source}: {len(result.clusters)} cluster(s), {config.hours:g} h of failures "
        f"then {config.drain_hours:g} h of drain, seed {config.seed}, {result.rentals} rentals "
        f"(virtual time, {result.seconds:.1f} s of wall time)",
        f"failure mix {mix}: {describe(config.mix)}",
        "",
        "Dollars by cause (`ray-vast cost` on the run's state and ledger; vastsim's meter beside):",
    ]
    shown = [c for c in CAUSES if any(row.by_cause.get(c, 0.0) > 0 for row in result.clusters)]
    width = max(10, *(len(c.name) for c in result.clusters))
    head = "".join(f" {HEADINGS[c]:>8}" for c in shown)
    lines.append(
        f"  {'cluster':<{width}} {'cap $/h':>8} {'avg $/h':>8} {'dollars':>9} {'meter':>9}{head}"
    )
    hours = config.hours + config.drain_hours
    for row in result.clusters:
        cells = "".join(f" {row.by_cause.get(c, 0.0):>8.2f}" for c in shown)
        lines.append(
            f"  {row.name:<{width}} {row.cap:>8.2f} {row.dollars / hours:>8.2f} "
            f"{row.dollars:>9.2f} {row.meter:>9.2f}{cells}"
        )
    cells = "".join(
        f" {sum(row.by_cause.get(c, 0.0) for row in result.clusters):>8.2f}" for c in shown
    )
    lines.append(
        f"  {'total':<{width}} {'':>8} {result.dollars / hours:>8.2f} {result.dollars:>9.2f} "
        f"{result.meter:>9.2f}{cells}"
    )
    lines += [
        "",
        "Waste against the floor ('$ after': billed after each failure began; '$ floor': had it",
        "ended at the earliest moment the default windows allow; latency: failure -> first stop "
        "or destroy):",
        f"  {'class':<9} {'n':>4} {'ended':>5} {'p50':>7} {'p95':>7} {'max':>7} "
        f"{'$ after':>9} {'$ floor':>8} {'ratio':>7}",
    ]
    for c in result.classes:
        lines.append(
            f"  {c.fate.value:<9} {c.failures:>4} {c.ended:>5} {minutes(c.latency[0]):>7} "
            f"{minutes(c.latency[1]):>7} {minutes(c.latency[2]):>7} {c.wasted:>9.2f} "
            f"{c.floor:>8.2f} {times(c.ratio):>7}"
        )
    failures = sum(c.failures for c in result.classes)
    ended = sum(c.ended for c in result.classes)
    lines.append(
        f"  {'all':<9} {failures:>4} {ended:>5} {'':>7} {'':>7} {'':>7} {result.wasted:>9.2f} "
        f"{result.floor:>8.2f} {times(ratio_of(result.wasted, result.floor)):>7}"
    )
    false = sum(result.false_destroys.values())
    why = ", ".join(f"{k} {v}" for k, v in sorted(result.false_destroys.items()))
    lines += [
        "",
        f"False destroys: {false}"
        + (f" ({why})" if why else "")
        + f". Leaks: {result.leaks} (${result.leak_dph:.2f}/h still billing at the end)."
        + (
            f" Kept up by min_workers at the end: {result.kept_at_minimum}."
            if result.kept_at_minimum
            else ""
        )
        + f" Work delivered: {result.worked_hours:.0f} worker-hours.",
    ]
    return "\n".join(lines) + "\n"


def as_json(result: Result, *, source: str, mix_source: str | None) -> dict[str, Any]:
    config = result.config
    mix = config.mix
    return {
        "format_version": FORMAT_VERSION,
        "source": source,
        "seed": config.seed,
        "hours": config.hours,
        "drain_hours": config.drain_hours,
        "mix": {
            "source": mix_source,
            "fates": {f.value: w for f, w in mix.fates.items()},
            "orphans_per_day": mix.orphans_per_day,
        },
        "rentals": result.rentals,
        "dollars": round(result.dollars, 6),
        "meter_dollars": round(result.meter, 6),
        "clusters": [
            {
                "name": row.name,
                "cap_dollars_per_hour": row.cap,
                "dollars": round(row.dollars, 6),
                "meter_dollars": round(row.meter, 6),
                "by_cause": {c.value: round(v, 6) for c, v in row.by_cause.items()},
            }
            for row in result.clusters
        ],
        "classes": [_class(c) for c in result.classes],
        "wasted_dollars": round(result.wasted, 6),
        "floor_dollars": round(result.floor, 6),
        "false_destroys": dict(sorted(result.false_destroys.items())),
        "leaks": result.leaks,
        "leak_dollars_per_hour": round(result.leak_dph, 6),
        "kept_at_minimum": result.kept_at_minimum,
        "worked_hours": round(result.worked_hours, 3),
        "wall_seconds": round(result.seconds, 3),
    }


def _class(c: ClassRow) -> dict[str, Any]:
    def seconds(value: float) -> float | None:
        return None if math.isnan(value) or math.isinf(value) else round(value, 3)

    return {
        "class": c.fate.value,
        "failures": c.failures,
        "ended": c.ended,
        "latency_seconds": {
            "p50": seconds(c.latency[0]),
            "p95": seconds(c.latency[1]),
            "max": seconds(c.latency[2]),
        },
        "wasted_dollars": round(c.wasted, 6),
        "floor_dollars": round(c.floor, 6),
    }


def savings_human(s: Savings | None) -> str:
    """What `scheduling: cheapest` would have saved, said after the run's own figures."""
    if s is None:
        return (
            "\nScheduling: no node type's shape fits inside another's, so Ray's score and the "
            "price never disagree (`scheduling: cheapest` would choose the same).\n"
        )
    verb = "saved" if s.saved >= 0 else "cost"
    return (
        f"\nScheduling on {', '.join(s.clusters)} (the same scenario, demand asked by shape as "
        "Ray's tasks ask it):\n"
        f"  scheduling: ray       ${s.ray_dollars:>9.2f}  {s.ray_rentals:>4} rentals  "
        f"{s.ray_worked_hours:>6.0f} worker-hours\n"
        f"  scheduling: cheapest  ${s.cheapest_dollars:>9.2f}  {s.cheapest_rentals:>4} rentals  "
        f"{s.cheapest_worked_hours:>6.0f} worker-hours\n"
        f"  cheapest would have {verb} ${abs(s.saved):.2f} ({abs(s.saved_share):.1%})\n"
    )


def savings_json(s: Savings | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "clusters": list(s.clusters),
        "ray_dollars": round(s.ray_dollars, 6),
        "cheapest_dollars": round(s.cheapest_dollars, 6),
        "saved_dollars": round(s.saved, 6),
        "ray_worked_hours": round(s.ray_worked_hours, 3),
        "cheapest_worked_hours": round(s.cheapest_worked_hours, 3),
        "ray_rentals": s.ray_rentals,
        "cheapest_rentals": s.cheapest_rentals,
    }


def kept(state_dir: Path, config: Config) -> str:
    """Where the run's state went, and how to read its bill (the run's clock is its own)."""
    start = datetime.fromtimestamp(START, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    end = datetime.fromtimestamp(config.end, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return (
        f"\nThe run's state and ledger are in {state_dir} (its clock ran {start} to {end} UTC):\n"
        f"  ray-vast cost --state-dir {state_dir} --until {end} --by cause\n"
    )
