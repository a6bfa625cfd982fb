"""The GPUs' part of the heartbeat's sample: the busiest GPU's utilisation and memory activity
and the fullest GPU's memory, from NVML, else from nvidia-smi, else nothing.

Memory activity (NVML's `utilization.memory`: the share of the last sample period in which device
memory was read or written) is work; memory merely held is not (an idle Ray worker keeps what its
last task's framework cached), so the head counts the first as traffic and only shows the second.

One busy GPU of eight is work, so the sample is the maximum over GPUs, not the mean. NVML
(`libnvidia-ml.so.1`, which the NVIDIA container runtime puts in every GPU container) is read
through ctypes: initialised once per `GpuSampler`, and any failure (no library, no driver, an
error code) falls back to nvidia-smi (`SMI_QUERY`), and any failure of that to nulls. Nothing
here raises. `load_nvml` is injectable so tests can hand in a fake library of ctypes callbacks;
`parse_smi` is a pure function of nvidia-smi's output.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

NVML_LIBRARY = "libnvidia-ml.so.1"
NVML_SUCCESS = 0
SMI_QUERY = "--query-gpu=utilization.gpu,utilization.memory,memory.used,memory.total"


class NvmlUtilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


@dataclass(frozen=True)
class GpuReading:
    """One GPU: utilisation 0..1, memory used / total 0..1 and memory activity 0..1, each None
    when not known."""

    utilisation: float | None
    memory: float | None
    activity: float | None = None


@dataclass(frozen=True)
class GpuSample:
    gpu_fraction: float | None
    memory_fraction: float | None
    source: str | None  # "nvml" | "nvidia-smi" | None
    memory_activity: float | None = None


NO_GPUS = GpuSample(None, None, None)


def summarise(readings: Iterable[GpuReading], source: str) -> GpuSample:
    """The busiest GPU's utilisation and memory activity and the fullest GPU's memory; nulls
    without readings."""
    found = list(readings)
    busy = [r.utilisation for r in found if r.utilisation is not None]
    full = [r.memory for r in found if r.memory is not None]
    active = [r.activity for r in found if r.activity is not None]
    if not busy and not full and not active:
        return NO_GPUS
    return GpuSample(_most(busy), _most(full), source, _most(active))


def _most(values: list[float]) -> float | None:
    return round(_clamp(max(values)), 4) if values else None


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "", ...
    return value if math.isfinite(value) and value >= 0 else None  # NaN, inf, negative: none


def parse_smi(text: str) -> list[GpuReading]:
    """Lines of `utilization.gpu, utilization.memory, memory.used, memory.total` (csv,
    noheader, nounits); lines that are blank or say nothing usable are skipped, a field that says
    "[N/A]" is unknown."""
    readings = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        busy, active, used, total = (_number(f) for f in fields)
        reading = GpuReading(
            None if busy is None else busy / 100.0,
            used / total if used is not None and total else None,
            None if active is None else active / 100.0,
        )
        if any(v is not None for v in (reading.utilisation, reading.memory, reading.activity)):
            readings.append(reading)
    return readings


def load_nvml() -> Any:
    """The NVML library (a ctypes CDLL); raises OSError where there is none."""
    return ctypes.CDLL(NVML_LIBRARY)


class Nvml:
    """An initialised NVML library: `read` gives one reading per GPU, or None on any error."""

    def __init__(self, library: Any) -> None:
        self.library = library

    @classmethod
    def open(cls, loader: Callable[[], Any]) -> Nvml | None:
        try:
            library = loader()
            if library.nvmlInit_v2() != NVML_SUCCESS:
                return None
        except Exception:  # no library, no symbol, no driver: no NVML
            return None
        return cls(library)

    def read(self) -> list[GpuReading] | None:
        lib = self.library
        try:
            count = ctypes.c_uint(0)
            if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != NVML_SUCCESS:
                return None
            readings = []
            for index in range(count.value):
                handle = ctypes.c_void_p()
                if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)):
                    return None
                rates, memory = NvmlUtilization(), NvmlMemory()
                busy: float | None = None
                active: float | None = None
                if lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) == NVML_SUCCESS:
                    busy, active = rates.gpu / 100.0, rates.memory / 100.0
                used: float | None = None
                if lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == NVML_SUCCESS:
                    used = memory.used / memory.total if memory.total else None
                readings.append(GpuReading(busy, used, active))
            return readings
        except Exception:  # never raise from a sample
            return None


class GpuSampler:
    """NVML first (opened on the first sample, once), then nvidia-smi, then nulls."""

    def __init__(
        self,
        *,
        load_nvml: Callable[[], Any] = load_nvml,
        which: Callable[[str], str | None] = shutil.which,
        timeout: float = 5.0,
    ) -> None:
        self._load = load_nvml
        self._which = which
        self._timeout = timeout
        self._nvml: Nvml | None = None
        self._opened = False

    def sample(self) -> GpuSample:
        if not self._opened:
            self._opened = True
            self._nvml = Nvml.open(self._load)
        if self._nvml is not None:
            readings = self._nvml.read()
            if readings:
                return summarise(readings, "nvml")
        return self._smi()

    def _smi(self) -> GpuSample:
        smi = self._which("nvidia-smi")
        if smi is None:
            return NO_GPUS
        try:
            done = subprocess.run(
                [smi, SMI_QUERY, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
            )
        except (OSError, subprocess.SubprocessError, ValueError):
            return NO_GPUS
        if done.returncode != 0:
            return NO_GPUS
        return summarise(parse_smi(done.stdout), "nvidia-smi")
