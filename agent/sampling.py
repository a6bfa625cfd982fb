"""What a heartbeat says about the worker: the process limit, Ray's ports, a utilisation sample.

The head's idle scanner decides "traffic" from this sample (CPU or GPU utilisation, or network
bytes, above a small threshold), and the heartbeat carries the state of the process limit: the
container's pids against its cgroup `pids.max`, and which of Ray's bounded worker ports are taken.
Each reading is a pure function of a /proc or /sys file's text, so it is tested with fixtures;
`Sampler` reads the files and keeps the previous reading to turn counters into rates.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass
class _Previous:
    at: float
    cpu: tuple[int, int] | None
    net: tuple[int, int] | None


class Sampler:
    """Reads the files of one machine (under `root`) into heartbeat fields."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self._previous: _Previous | None = None

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

    def utilisation(self) -> dict[str, Any]:
        now = time.monotonic()
        stat, dev = self._read("proc/stat"), self._read("proc/net/dev")
        cpu = cpu_times(stat) if stat else None
        net = net_bytes(dev) if dev else None
        previous, self._previous = self._previous, _Previous(now, cpu, net)
        sample: dict[str, Any] = {
            "sample_seconds": None,
            "cpu_fraction": None,
            "load1": load1(self._read("proc/loadavg") or ""),
            "memory_used_fraction": memory_used_fraction(self._read("proc/meminfo") or ""),
            "net_rx_bytes": None,
            "net_tx_bytes": None,
            "gpu_fraction": gpu_fraction(),
        }
        if previous is None:
            return sample
        sample["sample_seconds"] = round(now - previous.at, 3)
        if cpu and previous.cpu and cpu[1] > previous.cpu[1]:
            busy = (cpu[0] - previous.cpu[0]) / (cpu[1] - previous.cpu[1])
            sample["cpu_fraction"] = round(min(1.0, max(0.0, busy)), 4)
        if net and previous.net:
            sample["net_rx_bytes"] = max(0, net[0] - previous.net[0])
            sample["net_tx_bytes"] = max(0, net[1] - previous.net[1])
        return sample

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except OSError:
            return None


def gpu_fraction() -> float | None:
    """Mean GPU utilisation from nvidia-smi; None without it (or without GPUs)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [float(v) for v in out.split() if v.replace(".", "", 1).isdigit()]
    return round(sum(values) / len(values) / 100.0, 4) if values else None
