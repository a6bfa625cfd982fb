"""The machine as Ray should see it: the real core count, and the GPUs.

GPUs: the NVIDIA devices in /dev (`nvidia0`, `nvidia1`, ...: docker's `--gpus` gives a vast
container exactly its own), unless the simulator says the container's GPUs are simulated
(`VASTSIM_GPUS=<n>`: there are no devices to find, and the count is the offer's). `detect_gpus`
says which, so the container's log shows where the count came from.

`os.cpu_count()` is the host's count, not the container's: a vast container on a 64-core host may
be allowed 8. Ray started with 64 CPUs would schedule 64 tasks on 8 cores. So the count is the
smallest of what the cgroup CPU quota allows (v2 `cpu.max`, v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`, on the container's cgroup and every parent) and the CPUs the process may run
on (`os.sched_getaffinity`), rounded down, at least 1. `cores_from` is the pure rule over file
contents; `read_cores` finds the files (under a root directory, so tests can give fixtures).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_NVIDIA_DEVICE = re.compile(r"^nvidia[0-9]+$")
SIMULATED_GPUS_ENV = "VASTSIM_GPUS"  # set by vastsim only (vastsim/lifecycle.py)


@dataclass(frozen=True)
class CoreCount:
    cores: int
    source: str


@dataclass(frozen=True)
class GpuCount:
    gpus: int
    source: str


def quota_v2(cpu_max: str) -> float | None:
    """CPUs a cgroup v2 `cpu.max` ("<quota> <period>" or "max <period>") allows; None: no limit."""
    parts = cpu_max.split()
    if not parts or parts[0] == "max":
        return None
    try:
        quota = float(parts[0])
        period = float(parts[1]) if len(parts) > 1 else 100_000.0
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def quota_v1(quota_us: str, period_us: str) -> float | None:
    """CPUs a cgroup v1 CFS quota allows; `-1` is no limit."""
    try:
        quota, period = float(quota_us.strip()), float(period_us.strip())
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cores_from(
    *,
    cpu_max: Sequence[str] = (),
    cfs: Sequence[tuple[str, str]] = (),
    affinity: int | None = None,
    online: int | None = None,
) -> CoreCount:
    """The core count from the contents of every `cpu.max` (v2) or CFS pair (v1) on the way
    from the container's cgroup to the root, the affinity set's size, and the online count."""
    limits: list[tuple[float, str]] = []
    for text in cpu_max:
        value = quota_v2(text)
        if value is not None:
            limits.append((value, f"cgroup v2 cpu.max {text.strip()!r}"))
    for quota_us, period_us in cfs:
        value = quota_v1(quota_us, period_us)
        if value is not None:
            limits.append((value, f"cgroup v1 cfs quota {quota_us.strip()}/{period_us.strip()}"))
    if affinity:
        limits.append((float(affinity), f"affinity of {affinity} CPUs"))
    if not limits:
        count = max(1, online or 1)
        return CoreCount(count, f"{count} CPUs online (no quota, no affinity)")
    value, source = min(limits, key=lambda item: item[0])
    return CoreCount(max(1, math.floor(value + 1e-9)), source)


def read_cores(root: Path = Path("/"), *, affinity: int | None = None) -> CoreCount:
    """The real core count of this container (files read under `root`)."""
    if affinity is None:
        affinity = _affinity() if root == Path("/") else None
    cgroup = _read(root / "proc/self/cgroup") or ""
    cpu_max = [t for t in (_read(p) for p in _v2_files(root, cgroup)) if t is not None]
    cfs = []
    for directory in _v1_dirs(root, cgroup):
        quota, period = (
            _read(directory / "cpu.cfs_quota_us"),
            _read(directory / "cpu.cfs_period_us"),
        )
        if quota is not None and period is not None:
            cfs.append((quota, period))
    online = os.cpu_count() if root == Path("/") else None
    return cores_from(cpu_max=cpu_max, cfs=cfs, affinity=affinity, online=online)


def count_gpus(device_names: Iterable[str]) -> int:
    """NVIDIA GPUs among the names in /dev (`nvidia0`, `nvidia1`, ...; not `nvidiactl`)."""
    return sum(1 for name in device_names if _NVIDIA_DEVICE.match(name))


def read_gpus(dev: Path = Path("/dev")) -> int:
    try:
        return count_gpus(os.listdir(dev))
    except OSError:
        return 0


def detect_gpus(env: Mapping[str, str], dev: Path = Path("/dev")) -> GpuCount:
    """The container's GPUs: the simulator's count when it says they are simulated, else the
    devices in `dev`. A `VASTSIM_GPUS` that is not a whole number is ignored (and said)."""
    said = env.get(SIMULATED_GPUS_ENV)
    if said is not None:
        text = said.strip()
        if text.isascii() and text.isdigit():
            return GpuCount(int(text), f"simulated by vastsim ({SIMULATED_GPUS_ENV}={text})")
        found = read_gpus(dev)
        return GpuCount(found, f"{SIMULATED_GPUS_ENV}={said!r} is no count; {found} in {dev}")
    return GpuCount(read_gpus(dev), f"NVIDIA devices in {dev}")


def _affinity() -> int | None:
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return len(getter(0))
    except OSError:
        return None


def _v2_files(root: Path, cgroup: str) -> list[Path]:
    """`cpu.max` of the container's v2 cgroup and of each parent up to the mount."""
    mount = root / "sys/fs/cgroup"
    paths = [mount / "cpu.max"]
    for line in cgroup.splitlines():
        if line.startswith("0::"):
            paths = [mount / rel / "cpu.max" for rel in _ancestry(line[3:])]
    return paths


def _v1_dirs(root: Path, cgroup: str) -> list[Path]:
    """The v1 CPU controller's directories for the container's cgroup and its parents."""
    mounts = [root / "sys/fs/cgroup/cpu", root / "sys/fs/cgroup/cpu,cpuacct"]
    relative = "/"
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            relative = parts[2]
    found: list[Path] = []
    for mount in mounts:
        found.extend(mount / rel for rel in _ancestry(relative))
    return found


def _ancestry(path: str) -> list[str]:
    """'/a/b' -> ['a/b', 'a', '']: the cgroup and its parents, relative to the mount."""
    parts = [p for p in path.strip().split("/") if p]
    return ["/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
