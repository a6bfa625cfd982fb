"""Offer rows as `POST /api/v0/bundles/` returns them.

The field names, types and units follow the reference (section 4.3): RAM in MB, `cuda_max_good` a
float, `driver_vers` an int, `verification` a string (there is no `verified` key), `external` null,
`hosting_type` always present, a geolocation that ends in a country code, and
`dph_total = dph_base + allocated_storage x storage_cost / 720`.
"""

from __future__ import annotations

from typing import Any

from vastsim.market import Bundle

VERICODES = {"verified": 1, "unverified": 0, "deverified": 2}
DAY = 86_400.0


def driver_vers(version: str) -> int:
    """`"535.183.01"` -> `535183001` (XXXYYYZZZ), as vast encodes it."""
    parts = [int(p) for p in version.split(".")[:3]] + [0, 0, 0]
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


def offer_row(
    bundle: Bundle, *, allocated_storage: float, kind: str, now: float, sim_start: float
) -> dict[str, Any]:
    """The offer as vast lists it, priced for `allocated_storage` GB and the search `kind`."""
    machine = bundle.machine
    n = bundle.num_gpus
    frac = n / machine.num_gpus
    compute = round(machine.dph_base * n, 6)
    min_bid = round(machine.bid_floor * n, 6)
    storage = machine.storage_dph(allocated_storage)
    base = min_bid if kind == "bid" else compute
    dph_total = base + storage
    dlperf = machine.dlperf * n
    flops = machine.total_flops * n
    end_date = sim_start + machine.max_duration_days * DAY
    free_disk = machine.disk_free() * n / max(1, len(machine.free_gpus()))
    cost = {
        "gpuCostPerHour": base,
        "diskHour": storage,
        "totalHour": dph_total,
        "discountTotalHour": 0.0,
        "discountedTotalPerHour": dph_total,
    }
    reliability = machine.reliability
    return {
        "id": bundle.offer_id,
        "ask_contract_id": bundle.offer_id,
        "bundle_id": bundle.offer_id,
        "bundled_results": None,
        "machine_id": machine.machine_id,
        "host_id": machine.host_id,
        "num_gpus": n,
        "gpu_name": machine.gpu_name,
        "gpu_ram": int(machine.gpu_ram_gb * 1000),
        "gpu_total_ram": int(machine.gpu_ram_gb * 1000) * n,
        "gpu_frac": frac,
        "gpu_arch": machine.gpu_arch,
        "gpu_ids": list(bundle.gpu_ids),
        "gpu_lanes": 16,
        "gpu_mem_bw": machine.gpu_mem_bw,
        "gpu_max_power": machine.gpu_max_power,
        "gpu_max_temp": 83.0,
        "gpu_display_active": False,
        "compute_cap": machine.compute_cap,
        "cuda_max_good": machine.cuda_max_good,
        "driver_version": machine.driver_version,
        "driver_vers": driver_vers(machine.driver_version),
        "cpu_name": machine.cpu_name,
        "cpu_arch": machine.cpu_arch,
        "cpu_cores": machine.cpu_cores,
        "cpu_cores_effective": machine.cpu_cores * frac,
        "cpu_ghz": machine.cpu_ghz,
        "cpu_ram": int(machine.cpu_ram_gb * 1000),
        "disk_space": round(free_disk, 1),
        "disk_bw": machine.disk_bw,
        "disk_name": machine.disk_name,
        "inet_up": machine.inet_up,
        "inet_down": machine.inet_down,
        "inet_up_cost": machine.inet_up_cost,
        "inet_down_cost": machine.inet_down_cost,
        "internet_up_cost_per_tb": machine.inet_up_cost * 1000,
        "internet_down_cost_per_tb": machine.inet_down_cost * 1000,
        "direct_port_count": machine.direct_port_count,
        "pci_gen": machine.pci_gen,
        "pcie_bw": machine.pcie_bw,
        "bw_nvlink": 0.0,
        "mobo_name": machine.mobo_name,
        "has_avx": 1,
        "os_version": machine.os_version,
        "static_ip": machine.static_ip,
        "vms_enabled": False,
        "dph_base": compute,
        "dph_total": dph_total,
        "dph_total_adj": dph_total,
        "storage_cost": machine.storage_cost,
        "storage_total_cost": storage,
        "min_bid": min_bid,
        "is_bid": kind == "bid",
        "vram_costperhour": base / max(1.0, machine.gpu_ram_gb * n),
        "credit_discount_max": 0.0,
        "discount_rate": 0.0,
        "discounted_hourly": 0.0,
        "discounted_dph_total": dph_total,
        "dlperf": dlperf,
        "dlperf_per_dphtotal": dlperf / dph_total if dph_total else 0.0,
        "flops_per_dphtotal": flops / dph_total if dph_total else 0.0,
        "total_flops": flops,
        "score": score(dlperf, dph_total, reliability),
        "search": cost,
        "instance": {**cost, "gpuCostPerHour": 0.0, "totalHour": storage},
        "rentable": machine.rentable,
        "rented": False,
        "external": None,
        "hosting_type": machine.hosting_type,
        "verification": machine.verification,
        "vericode": VERICODES.get(machine.verification, 0),
        "reliability": reliability,
        "reliability2": reliability,
        "reliability_mult": reliability,
        "expected_reliability": reliability,
        "geolocation": machine.geolocation,
        "geolocode": sum(ord(c) for c in machine.geolocation[-2:]),
        "public_ipaddr": machine.ip,
        "hostname": None,
        "logo": "/static/logos/vastai_small2.png",
        "webpage": None,
        "start_date": sim_start,
        "end_date": end_date,
        "duration": max(0.0, end_date - now),
        "cluster_id": None,
        "avail_vol_ask_id": None,
        "avail_vol_dph": None,
        "avail_vol_size": None,
        "resource_type": "gpu",
        "platform_fee": 0.0,
        "time_remaining": "",
        "time_remaining_isbid": "",
        "rn": 0,
    }


def score(dlperf: float, dph_total: float, reliability: float) -> float:
    """vast's default sort key rewards performance per dollar and reliability."""
    if dph_total <= 0:
        return 0.0
    return dlperf / dph_total * reliability**4
