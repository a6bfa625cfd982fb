"""A seeded generator of large markets, for benchmarks and scale tests.

The same seed always yields the same machines, so a benchmark's numbers can be compared run to run.
Prices, sizes and reliabilities are drawn around what vast.ai listed in 2026 for each GPU type.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from vastsim.market import STANDARD_IMAGES, Machine, Market, Traits


@dataclass(frozen=True)
class GpuType:
    name: str
    ram_gb: float
    price: tuple[float, float]  # $/h per GPU, low..high
    compute_cap: int
    dlperf: float
    flops: float
    counts: tuple[int, ...]  # GPUs per machine, as hosts build them


CATALOGUE: tuple[GpuType, ...] = (
    GpuType("GTX 1080 Ti", 11, (0.04, 0.09), 610, 10.0, 11.0, (1, 2, 4)),
    GpuType("RTX 3060", 12, (0.05, 0.10), 860, 12.0, 13.0, (1, 2)),
    GpuType("RTX 3090", 24, (0.13, 0.25), 860, 28.0, 36.0, (1, 2, 4, 8)),
    GpuType("RTX 4090", 24, (0.28, 0.55), 890, 55.0, 82.0, (1, 2, 4, 8)),
    GpuType("RTX A6000", 48, (0.35, 0.60), 860, 38.0, 38.0, (1, 2, 4, 8)),
    GpuType("L40S", 48, (0.55, 0.90), 890, 60.0, 91.0, (1, 2, 4, 8)),
    GpuType("A100 PCIE", 40, (0.60, 1.00), 800, 70.0, 78.0, (1, 2, 4, 8)),
    GpuType("A100 SXM4", 80, (0.80, 1.40), 800, 80.0, 78.0, (1, 2, 4, 8)),
    GpuType("H100 SXM", 80, (1.60, 2.60), 900, 140.0, 200.0, (1, 2, 4, 8)),
)

PLACES: tuple[str, ...] = (
    "California, US",
    "Texas, US",
    "Oregon, US",
    "New York, US",
    "Quebec, CA",
    "Ontario, CA",
    "Hesse, DE",
    "North Holland, NL",
    "Ile-de-France, FR",
    "England, GB",
    "Stockholm, SE",
    "Tokyo, JP",
    "Seoul, KR",
    "Sao Paulo, BR",
)

CPU_IMAGE = "rayproject/ray:2.60.0-py311-cpu"
GPU_IMAGE = "rayproject/ray:2.60.0-py311-cu124"


def generate_market(seed: int = 1, machines: int = 500, *, faulty: float = 0.0) -> Market:
    """A large seeded random market; `faulty` is the share of machines with a failure trait."""
    return Market(generate_machines(seed, machines, faulty=faulty), images=STANDARD_IMAGES)


def generate_machines(seed: int, count: int, *, faulty: float = 0.0) -> list[Machine]:
    """`count` machines on hosts of one to four machines each, drawn from `seed`."""
    rng = random.Random(seed)  # noqa: S311 - a simulation, not cryptography
    machines: list[Machine] = []
    host_id = 100_000
    while len(machines) < count:
        host_id += 1
        place = rng.choice(PLACES)
        datacenter = rng.random() < 0.2
        for _ in range(min(rng.randint(1, 4), count - len(machines))):
            machine_id = 200_000 + len(machines) + 1
            machines.append(
                _machine(
                    rng, machine_id, host_id, place=place, datacenter=datacenter, faulty=faulty
                )
            )
    return machines


def _machine(
    rng: random.Random,
    machine_id: int,
    host_id: int,
    *,
    place: str,
    datacenter: bool,
    faulty: float,
) -> Machine:
    gpu = rng.choice(CATALOGUE)
    num_gpus = rng.choice(gpu.counts)
    cores = num_gpus * rng.choice((4, 8, 12, 16))
    dph = round(rng.uniform(*gpu.price), 4)
    reliability = round(min(0.9999, max(0.5, rng.gauss(0.975 if datacenter else 0.95, 0.04))), 4)
    cached = tuple(
        image for image, share in ((CPU_IMAGE, 0.5), (GPU_IMAGE, 0.3)) if rng.random() < share
    )
    return Machine(
        machine_id=machine_id,
        host_id=host_id,
        gpu_name=gpu.name,
        num_gpus=num_gpus,
        dph_base=dph,
        min_bid=round(dph * rng.uniform(0.35, 0.7), 4),
        storage_cost=round(rng.uniform(0.05, 0.30), 3),
        gpu_ram_gb=gpu.ram_gb,
        compute_cap=gpu.compute_cap,
        cuda_max_good=rng.choice((11.8, 12.2, 12.4, 12.6, 12.8)),
        dlperf=gpu.dlperf,
        total_flops=gpu.flops,
        cpu_cores=cores,
        cpu_ram_gb=float(cores * rng.choice((4, 8))),
        disk_gb=float(rng.choice((250, 500, 1000, 2000))),
        inet_up=round(rng.uniform(50, 2000), 1),
        inet_down=round(rng.uniform(100, 5000), 1),
        direct_port_count=rng.choice((0, 20, 100, 500)),
        reliability=reliability,
        verification="verified" if rng.random() < 0.85 else "unverified",
        geolocation=place,
        hosting_type=1 if datacenter else 0,
        static_ip=datacenter,
        cached_images=cached,
        pull_speed_mbps=round(rng.uniform(20, 500), 1),
        traits=_traits(rng, faulty),
    )


def _traits(rng: random.Random, faulty: float) -> Traits:
    if rng.random() >= faulty:
        return Traits()
    kind = rng.choice(("never_boots", "oci_failure", "offline_after", "ip_change_after"))
    if kind == "never_boots":
        return Traits(never_boots=True)
    if kind == "oci_failure":
        return Traits(oci_failure=True)
    after = round(rng.uniform(600, 86_400), 1)
    if kind == "offline_after":
        return Traits(offline_after=after)
    return Traits(ip_change_after=after)
