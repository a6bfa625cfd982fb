"""The heartbeat's GPUs (issue 16): the busiest GPU and the fullest GPU memory, from NVML (a fake
library of ctypes callbacks here), else nvidia-smi (a fake script on PATH), else nulls."""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

from agent import gpus_sample
from agent.gpus_sample import GpuReading, GpuSample, GpuSampler, NvmlMemory, NvmlUtilization
from agent.sampling import Sampler

NVML_OK, NVML_ERROR_UNKNOWN, NVML_ERROR_DRIVER_NOT_LOADED = 0, 999, 9
GIB = 1 << 30


class FakeNvml:
    """The five NVML calls the agent makes, as real C function pointers (ctypes callbacks) that
    write through the pointers they are handed, like libnvidia-ml.so.1 does."""

    def __init__(self, gpus: list[tuple[int, int, int]], *, init: int = NVML_OK) -> None:
        self.gpus = gpus  # (utilisation %, memory used, memory total) per GPU
        self.activity: dict[int, int] = {}  # memory activity % by GPU index (else 0)
        self.inits = 0
        self.fail_memory = False
        self.fail_count = False

        def init_v2() -> int:
            self.inits += 1
            return init

        def count_v2(out: Any) -> int:
            if self.fail_count:
                return NVML_ERROR_UNKNOWN
            out[0] = len(self.gpus)
            return NVML_OK

        def handle_v2(index: int, out: Any) -> int:
            out[0] = index + 1  # a handle is an opaque pointer; ours is the index + 1
            return NVML_OK

        def utilization(handle: Any, out: Any) -> int:
            out[0].gpu, out[0].memory = self.gpus[handle - 1][0], self.activity.get(handle - 1, 0)
            return NVML_OK

        def memory(handle: Any, out: Any) -> int:
            if self.fail_memory:
                return NVML_ERROR_UNKNOWN
            _, used, total = self.gpus[handle - 1]
            out[0].total, out[0].used, out[0].free = total, used, total - used
            return NVML_OK

        c_int, c_uint, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p
        self.nvmlInit_v2 = ctypes.CFUNCTYPE(c_int)(init_v2)
        self.nvmlDeviceGetCount_v2 = ctypes.CFUNCTYPE(c_int, ctypes.POINTER(c_uint))(count_v2)
        self.nvmlDeviceGetHandleByIndex_v2 = ctypes.CFUNCTYPE(
            c_int, c_uint, ctypes.POINTER(c_void_p)
        )(handle_v2)
        self.nvmlDeviceGetUtilizationRates = ctypes.CFUNCTYPE(
            c_int, c_void_p, ctypes.POINTER(NvmlUtilization)
        )(utilization)
        self.nvmlDeviceGetMemoryInfo = ctypes.CFUNCTYPE(
            c_int, c_void_p, ctypes.POINTER(NvmlMemory)
        )(memory)


def no_library() -> Any:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file: No such file or directory")


def fake_smi(directory: Path, output: str, exit_code: int = 0) -> Path:
    """An `nvidia-smi` that prints `output` for the agent's query (and records its argv)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    (directory / "said").write_text(output)
    script.write_text(
        f'#!/bin/sh\necho "$@" > "{directory}/argv"\ncat "{directory}/said"\nexit {exit_code}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def on_path(directory: Path) -> Any:
    return lambda name: shutil.which(name, path=f"{directory}{os.pathsep}/usr/bin:/bin")


def test_the_busiest_gpu_not_the_mean():
    """One busy GPU of eight is work: the old mean said 11 %."""
    readings = [GpuReading(0.0, 0.01)] * 7 + [GpuReading(0.9, 0.6)]
    assert gpus_sample.summarise(readings, "nvml") == GpuSample(0.9, 0.6, "nvml")
    assert gpus_sample.summarise([], "nvml") == gpus_sample.NO_GPUS
    assert gpus_sample.summarise([GpuReading(None, 0.5)], "nvidia-smi") == GpuSample(
        None, 0.5, "nvidia-smi"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "10, 5, 1024, 8192\n75, 40, 6144, 8192\n",
            [GpuReading(0.1, 0.125, 0.05), GpuReading(0.75, 0.75, 0.4)],
        ),
        ("\n  \n30, 0, 100, 1000\n\n", [GpuReading(0.3, 0.1, 0.0)]),  # blank lines
        ("[N/A], [N/A], 512, 1024\n", [GpuReading(None, 0.5)]),  # no utilisation on this GPU
        ("40, 20, [N/A], [N/A]\n", [GpuReading(0.4, None, 0.2)]),
        ("0, 35, 100, 1000\n", [GpuReading(0.0, 0.1, 0.35)]),  # memory copies, no kernels
        ("[N/A], [N/A], [N/A], [N/A]\n", []),
        ("50, 0, 10, 0\n", [GpuReading(0.5, None, 0.0)]),  # total 0: no fraction
        ("10, 1024, 8192\n", []),  # not the shape asked for
        ("No devices were found\n", []),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", []),
        ("", []),
    ],
)
def test_nvidia_smi_output(text, expected):
    assert gpus_sample.parse_smi(text) == expected


def test_nvml_first_initialised_once():
    fake = FakeNvml([(10, 1 * GIB, 8 * GIB), (80, 6 * GIB, 8 * GIB)])
    gpus = GpuSampler(load_nvml=lambda: fake, which=lambda name: pytest.fail("no nvidia-smi"))
    assert gpus.sample() == GpuSample(0.8, 0.75, "nvml", 0.0)
    fake.gpus[0] = (95, 8 * GIB, 8 * GIB)
    assert gpus.sample() == GpuSample(0.95, 1.0, "nvml", 0.0)
    fake.gpus = [(0, 7 * GIB, 8 * GIB), (0, 1 * GIB, 8 * GIB)]
    fake.activity = {1: 45}  # no kernel runs, but GPU 1's memory is being copied: work
    assert gpus.sample() == GpuSample(0.0, 0.875, "nvml", 0.45)
    assert fake.inits == 1


def test_nvml_missing_falls_back_to_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_smi(bin_dir, "5, 30, 100, 1000\n70, 10, 900, 1000\n")
    gpus = GpuSampler(load_nvml=no_library, which=on_path(bin_dir))
    assert gpus.sample() == GpuSample(0.7, 0.9, "nvidia-smi", 0.3)
    argv = (bin_dir / "argv").read_text().split()
    assert argv == [
        "--query-gpu=utilization.gpu,utilization.memory,memory.used,memory.total",
        "--format=csv,noheader,nounits",
    ]


def test_nvml_that_fails_falls_back_each_time_it_fails(tmp_path):
    bin_dir = tmp_path / "bin"
    fake_smi(bin_dir, "20, 0, 1, 4\n")
    refused = FakeNvml([(10, 1, 2)], init=NVML_ERROR_DRIVER_NOT_LOADED)
    gpus = GpuSampler(load_nvml=lambda: refused, which=on_path(bin_dir))
    assert gpus.sample() == GpuSample(0.2, 0.25, "nvidia-smi", 0.0)
    assert gpus.sample().source == "nvidia-smi" and refused.inits == 1  # not tried again

    flaky = FakeNvml([(10, 1, 2)])
    gpus = GpuSampler(load_nvml=lambda: flaky, which=on_path(bin_dir))
    assert gpus.sample().source == "nvml"
    flaky.fail_count = True
    assert gpus.sample() == GpuSample(0.2, 0.25, "nvidia-smi", 0.0)
    flaky.fail_count = False
    flaky.fail_memory = True  # a GPU whose memory cannot be read still has its utilisation
    assert gpus.sample() == GpuSample(0.1, None, "nvml", 0.0)


def test_without_gpus_everything_is_null(tmp_path):
    nothing = GpuSampler(load_nvml=no_library, which=lambda name: None)
    assert nothing.sample() == GpuSample(None, None, None)
    empty = FakeNvml([])  # a driver and no GPU
    assert GpuSampler(load_nvml=lambda: empty, which=lambda n: None).sample().source is None
    broken = fake_smi(tmp_path / "broken", "garbage\n", exit_code=9)
    assert GpuSampler(load_nvml=no_library, which=lambda n: str(broken)).sample().source is None
    gone = str(tmp_path / "no-such-nvidia-smi")
    assert GpuSampler(load_nvml=no_library, which=lambda n: gone).sample().source is None
    na = fake_smi(tmp_path / "na", "[N/A], [N/A], [N/A], [N/A]\n")
    assert GpuSampler(load_nvml=no_library, which=lambda n: str(na)).sample().source is None


def test_the_sampler_carries_the_gpu_fields(tmp_path):
    fake = FakeNvml([(0, 0, 8 * GIB)] * 7 + [(60, 2 * GIB, 8 * GIB)])
    sample = Sampler(tmp_path, affinity=1, gpus=GpuSampler(load_nvml=lambda: fake)).utilisation()
    print("eight GPUs, one busy:", {k: v for k, v in sample.items() if k.startswith("gpu")})
    assert (sample["gpu_fraction"], sample["gpu_memory_fraction"], sample["gpu_source"]) == (
        0.6,
        0.25,
        "nvml",
    )


def test_the_real_loader_never_raises_out_of_the_sampler():
    """Whatever this machine has (no NVML here, or a real one on a GPU runner)."""
    got = GpuSampler().sample()
    assert got.source in (None, "nvml", "nvidia-smi")
