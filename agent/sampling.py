"""What a heartbeat says about the worker: the process limit, Ray's ports, a utilisation sample.

The head's idle scanner decides "traffic" from this sample (CPU or GPU utilisation, or network
bytes, above a small threshold), and the heartbeat carries the state of the process limit: the
container's pids against its cgroup `pids.max`, and which of Ray's bounded worker ports are taken.
Each reading is a pure function of a /proc or /sys file's text, so it is tested with fixtures;
`Sampler` reads the files and keeps the previous reading to turn counters into rates.

CPU is the container's own (DESIGN.md 10: "the container's own CPU"): /proc/stat is the whole
host's, and a vast host is shared, so a quiet container on a busy host would look busy forever.
`cpu_fraction` is the CPU time the process's own cgroup used since the previous sample over the
CPUs it may use in that time (its quota, `cpu.max` on v2 or the CFS quota on v1, or the affinity
set, whichever is smaller), and `cpu_source` says "cgroup". The cgroup is the one named in
/proc/self/cgroup (the v1 line of the `cpuacct` controller when there is one, else the v2 line
`0::<path>`), found below its mount in /proc/self/mountinfo (inside docker the path is "/" and
the container's own cgroup is mounted at /sys/fs/cgroup). Only when no cgroup can be read does the
sample fall back to /proc/stat, and `cpu_source` says "host". GPUs: `agent.gpus_sample`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from agent import cores
from agent.gpus_sample import GpuSampler

TCP_LISTEN = "0A"


def cpu_times(stat: str) -> tuple[int, int] | None:
    """(busy, total) jiffies from the `cpu` line of /proc/stat."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already counted in user
            return total - idle, total
    return None


def net_bytes(dev: str) -> tuple[int, int]:
    """(received, sent) bytes over every interface but loopback, from /proc/net/dev."""
    rx = tx = 0
    for line in dev.splitlines()[2:]:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx


def memory_used_fraction(meminfo: str) -> float | None:
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0])
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if not total or available is None:
        return None
    return min(1.0, max(0.0, 1.0 - available / total))


def load1(loadavg: str) -> float | None:
    try:
        return float(loadavg.split(maxsplit=1)[0])
    except (IndexError, ValueError):
        return None


def local_ports(tcp_tables: Iterable[str]) -> set[int]:
    """Local ports of every TCP socket (listening or connected) in /proc/net/tcp and tcp6."""
    ports: set[int] = set()
    for table in tcp_tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and ":" in fields[1]:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def listening_ports(tcp_tables: Iterable[str]) -> set[int]:
    ports: set[int] = set()
    for table in tcp_tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == TCP_LISTEN and ":" in fields[1]:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def pids_limit(text: str | None) -> int | None:
    """cgroup `pids.max`: a number, or 'max' (no limit)."""
    if text is None or not text.strip().isdigit():
        return None
    return int(text.strip())


# -- the container's own CPU: its cgroup ----------------------------------------------------


@dataclass(frozen=True)
class CgroupDir:
    """A cgroup directory: the hierarchy's version, where it is mounted, the path below that."""

    version: int  # 1 or 2
    mount: str  # absolute mount point, e.g. /sys/fs/cgroup/cpuacct
    relative: str  # below the mount, "" for the mount itself

    @property
    def path(self) -> str:
        return str(PurePosixPath(self.mount, self.relative)) if self.relative else self.mount

    def ancestry(self) -> list[str]:
        """This directory, then each parent up to and including the mount."""
        parts = [p for p in self.relative.split("/") if p]
        return [str(PurePosixPath(self.mount, *parts[:i])) for i in range(len(parts), -1, -1)]


@dataclass(frozen=True)
class CgroupMount:
    version: int
    root: str  # the cgroup path mounted here (docker without a cgroup namespace: /docker/<id>)
    point: str
    controllers: frozenset[str]  # v1 super options naming controllers; empty for v2


def own_cgroup(text: str, controller: str) -> tuple[int, str] | None:
    """(version, path) of this process's cgroup for `controller` from /proc/self/cgroup: the v1
    line listing the controller ("4:cpu,cpuacct:/docker/abc") when there is one, else the v2
    line ("0::/user.slice/x", inside docker "0::/"). A hybrid host lists both; its CPU
    controllers are the v1 ones, so the v1 line wins."""
    v2: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, names, path = parts
        if names == "" and parts[0] == "0":
            v2 = path
        elif controller in names.split(","):
            return 1, path
    return (2, v2) if v2 is not None else None


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 for a space)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def cgroup_mounts(mountinfo: str) -> list[CgroupMount]:
    """The cgroup (v1) and cgroup2 mounts in /proc/self/mountinfo."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(after) < 1:
            continue
        fstype = after[0]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        options = after[2].split(",") if len(after) > 2 else []
        found.append(
            CgroupMount(
                version=2 if fstype == "cgroup2" else 1,
                root=_unescape(fields[3]),
                point=_unescape(fields[4]),
                controllers=frozenset(options) if fstype == "cgroup" else frozenset(),
            )
        )
    return found


_V1_BASES = {
    "cpuacct": ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct"),
    "cpu": ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"),
}
_V2_BASES = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


def cgroup_dirs(cgroup: str, mountinfo: str, controller: str) -> list[CgroupDir]:
    """Where this process's cgroup of `controller` may be, best first: below each mount of its
    hierarchy that mounts a part of the tree containing it (mountinfo), then the usual places."""
    own = own_cgroup(cgroup, controller)
    if own is None:
        return []
    version, path = own
    found: list[CgroupDir] = []
    for mount in cgroup_mounts(mountinfo):
        if mount.version != version or (version == 1 and controller not in mount.controllers):
            continue
        root = mount.root.rstrip("/")
        if path == root or path.startswith(root + "/") or root == "":
            found.append(CgroupDir(version, mount.point, path[len(root) :].strip("/")))
    for base in _V1_BASES.get(controller, ()) if version == 1 else _V2_BASES:
        guess = CgroupDir(version, base, path.strip("/"))
        if guess not in found:
            found.append(guess)
    return found


def usage_v2(cpu_stat: str) -> int | None:
    """Nanoseconds of CPU a v2 cgroup used (`cpu.stat` usage_usec)."""
    for line in cpu_stat.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] == "usage_usec" and fields[1].isdigit():
            return int(fields[1]) * 1000
    return None


def usage_v1(cpuacct_usage: str) -> int | None:
    """Nanoseconds of CPU a v1 cgroup used (`cpuacct.usage`)."""
    text = cpuacct_usage.strip()
    return int(text) if text.isdigit() else None


def cpus_available(quotas: Iterable[float | None], affinity: int | None) -> float:
    """The CPUs a cgroup may use: the smallest quota on its way to the root, or the affinity set
    when that is smaller (or there is no quota); at least a sliver, never zero."""
    limits = [q for q in quotas if q is not None and q > 0]
    if affinity:
        limits.append(float(affinity))
    return max(min(limits), 0.01) if limits else 1.0


def cgroup_fraction(used_ns: int, elapsed: float, cpus: float) -> float | None:
    """Busy share of the CPUs available to a cgroup over `elapsed` seconds, clamped 0..1."""
    if elapsed <= 0 or cpus <= 0:
        return None
    return round(min(1.0, max(0.0, used_ns / (elapsed * 1e9 * cpus))), 4)


def _affinity() -> int | None:
    getter = getattr(os, "sched_getaffinity", None)
    if getter is not None:
        try:
            return len(getter(0))
        except OSError:
            pass
    return os.cpu_count()


@dataclass(frozen=True)
class CgroupUsage:
    where: str  # the directory read
    used_ns: int
    cpus: float


@dataclass
class _Previous:
    at: float
    cpu: tuple[int, int] | None
    net: tuple[int, int] | None
    cgroup: CgroupUsage | None


HOST_NETWORK_ENV = "VASTSIM_HOST_NETWORK"
"""Set to "1" by vastsim's process runner only: its containers share the host's network
namespace, so every interface in /proc/net/dev is the host's, and the container's own traffic
(to the head, to Ray) goes over loopback. The sample then counts no interface as the container's
(`count_network=False`), as a vast container counts only the interfaces of its own namespace."""


def counts_network(env: Mapping[str, str]) -> bool:
    """Whether this container's /proc/net/dev is its own (not vastsim's shared host network)."""
    return env.get(HOST_NETWORK_ENV) != "1"


# The shortest window a utilisation sample covers (see `Sampler.utilisation`).
MIN_WINDOW_SECONDS = 5.0


class Sampler:
    """Reads the files of one machine (under `root`) into heartbeat fields. `affinity` (the CPUs
    this process may run on) defaults to this process's; `clock` to the monotonic clock; `gpus`
    to one `GpuSampler` (NVML, then nvidia-smi) for this sampler's life; `count_network=False`
    leaves the network fields unknown (a container in the host's network namespace)."""

    def __init__(
        self,
        root: Path = Path("/"),
        *,
        affinity: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        gpus: GpuSampler | None = None,
        count_network: bool = True,
    ) -> None:
        self.root = root
        self.count_network = count_network
        self.affinity = affinity
        self.clock = clock
        self.gpus = gpus if gpus is not None else GpuSampler()
        self._previous: _Previous | None = None
        self._last: dict[str, Any] | None = None

    def tcp_tables(self) -> list[str]:
        return [t for t in (self._read(f"proc/net/{n}") for n in ("tcp", "tcp6")) if t]

    def ports_in_use(self, ports: Sequence[int]) -> list[int]:
        used = local_ports(self.tcp_tables())
        return sorted(p for p in ports if p in used)

    def listening(self, port: int) -> bool:
        return port in listening_ports(self.tcp_tables())

    def processes(self) -> tuple[int, int | None]:
        """(pids in the container, its pid limit)."""
        for base in ("sys/fs/cgroup", "sys/fs/cgroup/pids"):
            current = self._read(f"{base}/pids.current")
            if current and current.strip().isdigit():
                return int(current.strip()), pids_limit(self._read(f"{base}/pids.max"))
        try:
            count = sum(1 for entry in os.listdir(self.root / "proc") if entry.isdigit())
        except OSError:
            count = 0
        return count, None

    def cgroup_usage(self) -> CgroupUsage | None:
        """The CPU this process's cgroup has used so far and the CPUs it may use; None when no
        cgroup can be read."""
        cgroup = self._read("proc/self/cgroup") or ""
        mountinfo = self._read("proc/self/mountinfo") or ""
        for where in cgroup_dirs(cgroup, mountinfo, "cpuacct"):
            if where.version == 1:
                used = usage_v1(self._read_abs(f"{where.path}/cpuacct.usage") or "")
            else:
                used = usage_v2(self._read_abs(f"{where.path}/cpu.stat") or "")
            if used is not None:
                quotas = self._quotas(where, cgroup, mountinfo)
                affinity = self.affinity if self.affinity is not None else _affinity()
                return CgroupUsage(where.path, used, cpus_available(quotas, affinity))
        return None

    def _quotas(self, where: CgroupDir, cgroup: str, mountinfo: str) -> list[float | None]:
        """The CPU quotas on the way from the cgroup to its root (v2 cpu.max in the same tree;
        v1 the CFS quota of the `cpu` controller's tree, which may be mounted apart)."""
        if where.version == 2:
            return [cores.quota_v2(self._read_abs(f"{d}/cpu.max") or "") for d in where.ancestry()]
        for tree in cgroup_dirs(cgroup, mountinfo, "cpu"):
            if tree.version != 1 or self._read_abs(f"{tree.path}/cpu.cfs_quota_us") is None:
                continue
            return [
                cores.quota_v1(
                    self._read_abs(f"{d}/cpu.cfs_quota_us") or "",
                    self._read_abs(f"{d}/cpu.cfs_period_us") or "",
                )
                for d in tree.ancestry()
            ]
        return []

    def utilisation(self) -> dict[str, Any]:
        """The rates since the previous sample. A heartbeat sent out of step (the one that
        acknowledges a stop goes at once) would sample a window of milliseconds, in which the
        agent's own answer to the head is most of the CPU: issue 21's e2e run read every such
        window as traffic and called off every stop. A window shorter than
        `MIN_WINDOW_SECONDS` repeats the last full sample and leaves its counters running, so
        the next window covers it."""
        now = self.clock()
        if (
            self._previous is not None
            and self._last is not None
            and self._last["sample_seconds"]  # a full window to repeat (not the first reading)
            and now - self._previous.at < MIN_WINDOW_SECONDS
        ):
            return dict(self._last)
        self._last = self._read_sample(now)
        return dict(self._last)

    def _read_sample(self, now: float) -> dict[str, Any]:
        stat = self._read("proc/stat")
        dev = self._read("proc/net/dev") if self.count_network else None
        cpu = cpu_times(stat) if stat else None
        net = net_bytes(dev) if dev else None
        own = self.cgroup_usage()
        previous, self._previous = self._previous, _Previous(now, cpu, net, own)
        gpus = self.gpus.sample()
        sample: dict[str, Any] = {
            "sample_seconds": None,
            "cpu_fraction": None,
            "cpu_source": None,
            "load1": load1(self._read("proc/loadavg") or ""),
            "memory_used_fraction": memory_used_fraction(self._read("proc/meminfo") or ""),
            "net_rx_bytes": None,
            "net_tx_bytes": None,
            "gpu_fraction": gpus.gpu_fraction,
            "gpu_memory_fraction": gpus.memory_fraction,
            "gpu_memory_activity": gpus.memory_activity,
            "gpu_source": gpus.source,
        }
        if previous is None:
            return sample
        elapsed = now - previous.at
        sample["sample_seconds"] = round(max(0.0, elapsed), 3)
        before = previous.cgroup
        if own is not None and before is not None and before.where == own.where:
            fraction = cgroup_fraction(max(0, own.used_ns - before.used_ns), elapsed, own.cpus)
            if fraction is not None:
                sample["cpu_fraction"], sample["cpu_source"] = fraction, "cgroup"
        elif cpu and previous.cpu and cpu[1] > previous.cpu[1]:
            busy = (cpu[0] - previous.cpu[0]) / (cpu[1] - previous.cpu[1])
            sample["cpu_fraction"] = round(min(1.0, max(0.0, busy)), 4)
            sample["cpu_source"] = "host"
        if net and previous.net:
            sample["net_rx_bytes"] = max(0, net[0] - previous.net[0])
            sample["net_tx_bytes"] = max(0, net[1] - previous.net[1])
        return sample

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except OSError:
            return None

    def _read_abs(self, path: str) -> str | None:
        """A file named by its absolute path on the machine (read under `root`)."""
        return self._read(path.lstrip("/"))
