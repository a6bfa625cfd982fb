"""vast's GPU names as Ray names them (reconciler/model/accelerators.py), held to Ray's own rule:
the copy of `NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type` gives what Ray gives
for every NVML name tried, and vast's market names come out as Ray's constants where Ray has
one (ray.util.accelerators: A100, H100, L40S, ...)."""

from __future__ import annotations

import pytest
from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager
from ray.util.accelerators import accelerators as ray_accelerators

from reconciler.model.accelerators import accelerator_type, nvml_name, ray_name
from vastsim import Market

NVML_NAMES = [
    "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce GTX 1080 Ti",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA H200",
    "NVIDIA L40S",
    "NVIDIA L4",
    "NVIDIA A10G",
    "NVIDIA RTX A6000",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "Tesla V100-SXM2-16GB",
    "Tesla T4",
    "Quadro RTX 8000",
]


@pytest.mark.parametrize("name", NVML_NAMES)
def test_rays_rule_is_copied_exactly(name: str) -> None:
    assert ray_name(name) == NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(name)


@pytest.mark.parametrize(
    ("vast", "ray"),
    [
        ("A100 SXM4", ray_accelerators.NVIDIA_A100),
        ("A100 PCIE", ray_accelerators.NVIDIA_A100),
        ("H100 SXM", ray_accelerators.NVIDIA_H100),
        ("H100 NVL", ray_accelerators.NVIDIA_H100),
        ("H200", ray_accelerators.NVIDIA_H200),
        ("L40S", ray_accelerators.NVIDIA_L40S),
        ("L4", ray_accelerators.NVIDIA_L4),
        ("Tesla V100", ray_accelerators.NVIDIA_TESLA_V100),
        ("Tesla T4", ray_accelerators.NVIDIA_TESLA_T4),
        ("RTX 4090", "GeForce-RTX-4090"),  # Ray's name of "NVIDIA GeForce RTX 4090"
        ("GTX 1080 Ti", "GeForce-GTX-1080-Ti"),
        ("RTX A6000", "RTX-A6000"),
    ],
)
def test_vast_names_come_out_as_ray_names_them(vast: str, ray: str) -> None:
    assert accelerator_type(vast) == ray
    assert NvidiaGPUAcceleratorManager._gpu_name_to_accelerator_type(nvml_name(vast)) == ray


def test_every_card_of_the_simulated_market_has_a_ray_name() -> None:
    for name in Market.default().gpu_names():
        assert accelerator_type(name), name
