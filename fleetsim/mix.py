"""The failure mix of a simulation: what happens to each rental, and how often.

Every rental draws a fate from the mix's weights (keyed by its rank, so the k-th rental of two runs
of the same seed meets the same fate), and orphans appear at their own rate:

- `stall`: provisioning stalls (the host never finishes loading: vastsim `never_boots`);
- `boot`: the container runs but the image's PID 1 never starts the agent (it never enrolls);
- `dies`: the worker's container loses its network while the instance keeps running (no
  heartbeat, no report and no self-destroy gets out: only the head's side can end it);
- `net_drop`: the network path drops (vastsim takes the host `offline`);
- `idle`: a short job (`job_hours`), then the worker keeps heartbeating, quiet;
- `healthy`: a long job (`long_job_hours`), then quiet as well;
- `orphans_per_day`: instances with our label and no record (a crash between create and save).

Jobs have short quiet gaps (`gap_seconds`, every `gap_every_hours`), shorter than the default stop
timer, so the money chain's clearing is exercised all along; a dying rental fails
`fail_after_hours` after it enrolled. Ray's demand is a step curve per node type, from its
`min_workers` to its `max_workers`, a new step every `demand_step_hours`.

`FLEET_MIX` is the fleet benchmark's (bench/fleet.py); `read_mix` reads a YAML of the same keys,
any of which may be left out (the fleet benchmark's value is kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml


class Fate(StrEnum):
    STALL = "stall"
    BOOT = "boot"
    DIES = "dies"
    NET_DROP = "net-drop"
    ORPHAN = "orphan"
    IDLE = "idle"
    HEALTHY = "healthy"


# The failure classes, in the order of a machine's life (an idle worker is the last).
CLASSES: tuple[Fate, ...] = (
    Fate.STALL,
    Fate.BOOT,
    Fate.DIES,
    Fate.NET_DROP,
    Fate.ORPHAN,
    Fate.IDLE,
)
WORKING = frozenset({Fate.IDLE, Fate.HEALTHY})
DRAWN = (Fate.STALL, Fate.BOOT, Fate.DIES, Fate.NET_DROP, Fate.IDLE, Fate.HEALTHY)


@dataclass(frozen=True)
class Mix:
    fates: Mapping[Fate, float]  # weights of the fates a rental draws (orphans come on their own)
    orphans_per_day: float
    job_hours: tuple[float, float]
    long_job_hours: tuple[float, float]
    fail_after_hours: tuple[float, float]
    gap_every_hours: tuple[float, float]
    gap_seconds: tuple[float, float]
    demand_step_hours: tuple[float, float]


FLEET_MIX = Mix(
    fates={
        Fate.STALL: 0.06,
        Fate.BOOT: 0.06,
        Fate.DIES: 0.10,
        Fate.NET_DROP: 0.06,
        Fate.IDLE: 0.36,
        Fate.HEALTHY: 0.36,
    },
    orphans_per_day=8.0,
    job_hours=(0.2, 1.0),
    long_job_hours=(1.0, 6.0),
    fail_after_hours=(0.25, 4.0),
    gap_every_hours=(0.5, 3.0),
    gap_seconds=(60.0, 420.0),
    demand_step_hours=(1.0, 4.0),
)

_RANGES = (
    "job_hours",
    "long_job_hours",
    "fail_after_hours",
    "gap_every_hours",
    "gap_seconds",
    "demand_step_hours",
)
_FATE_KEYS = {f.value.replace("-", "_"): f for f in DRAWN}


class MixError(ValueError):
    """A failure mix file that cannot be used; the message says where and why."""


def read_mix(text: str, source: str) -> Mix:
    """A mix from YAML: fates as weights (`stall: 0.06`, ... `net_drop`, ...), `orphans_per_day`
    and the ranges as `[low, high]`; what it leaves out is the fleet benchmark's."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MixError(f"{source}: not YAML: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise MixError(f"{source}: a mapping of fates and rates, e.g. `dies: 0.1`")
    known = {*_FATE_KEYS, "orphans_per_day", *_RANGES}
    unknown = sorted(str(k) for k in doc if k not in known)
    if unknown:
        raise MixError(f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    fates = dict(FLEET_MIX.fates)
    for key, fate in _FATE_KEYS.items():
        if key in doc:
            fates[fate] = _number(doc[key], f"{source}: {key}")
    if sum(fates.values()) <= 0:
        raise MixError(f"{source}: the fates' weights add up to nothing")
    changes: dict[str, Any] = {"fates": fates}
    if "orphans_per_day" in doc:
        changes["orphans_per_day"] = _number(doc["orphans_per_day"], f"{source}: orphans_per_day")
    for key in _RANGES:
        if key in doc:
            changes[key] = _range(doc[key], f"{source}: {key}")
    return dataclasses.replace(FLEET_MIX, **changes)


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise MixError(f"{where}: a number, zero or more (got {value!r})")
    return float(value)


def _range(value: object, where: str) -> tuple[float, float]:
    if not isinstance(value, list) or len(value) != 2:
        raise MixError(f"{where}: [low, high] (got {value!r})")
    low, high = (_number(v, where) for v in value)
    if high < low:
        raise MixError(f"{where}: low {low:g} is above high {high:g}")
    if where.endswith(("demand_step_hours", "gap_every_hours")) and low <= 0:
        raise MixError(f"{where}: more than zero")
    return low, high


def describe(mix: Mix) -> str:
    """One line: the fates' shares and the orphans."""
    total = sum(mix.fates.values())
    parts = [f"{f.value} {100 * mix.fates.get(f, 0.0) / total:.0f}%" for f in DRAWN]
    return ", ".join(parts) + f"; {mix.orphans_per_day:g} orphans a day"
