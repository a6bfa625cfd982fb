"""Instances: the record of one rental, and its row as the API shows it.

The row follows the reference (section 6.4) in names, types and quirks: `start_date` is a float and
`extra_env` a list of `[key, value]` pairs on every row (the official client crashes otherwise),
`ports` appears only while running (Docker's shape, `HostPort` a string), ssh fields appear once the
instance has run, and `status_msg`, `local_ipaddrs` and (in listings) `public_ipaddr` carry the
trailing newline that real rows carry.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vastsim.market import Machine
from vastsim.offers import VERICODES, score

ENV_FLAG_KEYS = ("-p", "-h", "-v", "-n", "-e", "--")


@dataclass
class Instance:
    """One rental. `compute_dph` is the $/h billed on top of storage while running."""

    id: int
    offer_id: int
    machine: Machine
    gpu_ids: tuple[int, ...]
    image: str
    disk: float
    label: str | None
    env: list[tuple[str, str]]
    onstart: str | None
    runtype: str
    args: list[str] | None
    bid_price: float | None
    api_key: str
    created_at: float
    compute_dph: float
    storage_dph: float
    public_ip: str
    template_hash_id: str | None = None
    jupyter_token: str = ""
    actual_status: str | None = None
    intended_status: str = "running"
    cur_state: str = "running"
    next_state: str = "running"
    status_msg: str | None = None
    ports: dict[str, int] = field(default_factory=dict)
    boots: int = 0
    ip_changes: int = 0
    running_since: float | None = None
    first_running_at: float | None = None
    epoch: int = 0
    holds_gpus: bool = True
    outbid: bool = False
    force_oci_failure: bool = False
    ssh_keys: list[str] = field(default_factory=list)
    destroyed_at: float | None = None
    # A stop call not carried out yet (`Timing.stop_delay`): when it takes effect.
    stop_at: float | None = None
    hidden_listings: int = 0

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_ids)

    @property
    def is_bid(self) -> bool:
        return self.bid_price is not None

    @property
    def dph_total(self) -> float:
        return self.compute_dph + self.storage_dph

    @property
    def user_env(self) -> dict[str, str]:
        """The create's environment variables, without docker flags such as `-p 8080:8080`."""
        return {k: v for k, v in self.env if not k.startswith("-")}


def parse_env(value: Any) -> list[tuple[str, str]]:
    """The create body's `env`: an object (what 1.9.1 sends) or a docker-flag string."""
    if value is None or value == "":
        return []
    if isinstance(value, Mapping):
        return [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    if isinstance(value, str):
        return _parse_env_string(value)
    raise ValueError("env must be an object or a string")


def _parse_env_string(text: str) -> list[tuple[str, str]]:
    words = shlex.split(text)
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        arg = words[i + 1] if i + 1 < len(words) else ""
        if word == "-e" and "=" in arg:
            key, _, val = arg.partition("=")
            out.append((key, val))
            i += 2
        elif word == "-p":
            out.append((f"-p {arg}", "1"))
            i += 2
        elif word in ("-h", "-v", "-n"):
            out.append((word, arg))
            i += 2
        else:
            i += 1
    return out


def requested_ports(env: list[tuple[str, str]], runtype: str) -> list[str]:
    """Container ports to publish, as `"<port>/<proto>"`: `-p` flags plus the runtype's own."""
    wanted: list[str] = []
    tokens = runtype.split()
    if any(t.startswith("ssh") for t in tokens):
        wanted.append("22/tcp")
    if any(t.startswith("jupyter") for t in tokens):
        wanted.append("8080/tcp")
    for key, _ in env:
        if not key.startswith("-p "):
            continue
        spec = key[3:].strip()
        mapping, _, proto = spec.partition("/")
        container = mapping.rsplit(":", 1)[-1]
        if container.isdigit():
            wanted.append(f"{int(container)}/{proto or 'tcp'}")
    return list(dict.fromkeys(wanted))


INDEX_COLUMNS: dict[str, Callable[[Instance, float], Any]] = {
    "id": lambda i, now: i.id,
    "actual_status": lambda i, now: i.actual_status,
    "intended_status": lambda i, now: i.intended_status,
    "cur_state": lambda i, now: i.cur_state,
    "next_state": lambda i, now: i.next_state,
    "status_msg": lambda i, now: None if i.status_msg is None else i.status_msg + "\n",
    "label": lambda i, now: i.label,
    "gpu_name": lambda i, now: i.machine.gpu_name,
    "verification": lambda i, now: i.machine.verification,
    "machine_id": lambda i, now: i.machine.machine_id,
    "host_id": lambda i, now: i.machine.host_id,
    "image_uuid": lambda i, now: i.image,
    "start_date": lambda i, now: i.created_at,
    "geolocation": lambda i, now: i.machine.geolocation,
    "is_bid": lambda i, now: i.is_bid,
    "template_id": lambda i, now: None,
    "dph_total": lambda i, now: i.dph_total,
    "num_gpus": lambda i, now: i.num_gpus,
    "disk_space": lambda i, now: i.disk,
    "duration": lambda i, now: max(0.0, now - i.created_at),
}
"""Columns a listing can filter, sort and count on, with the values `instance_row` gives."""


def index_row(inst: Instance, now: float, columns: Iterable[str]) -> dict[str, Any]:
    """Just the listed columns of an instance's row: a page is chosen from these without
    building every full row."""
    return {column: INDEX_COLUMNS[column](inst, now) for column in columns}


def instance_row(inst: Instance, now: float, *, listing: bool) -> dict[str, Any]:
    """The instance as `GET /api/v0/instances/{id}/` (listing=False) or the v1 list shows it."""
    machine = inst.machine
    n = inst.num_gpus
    frac = n / machine.num_gpus
    running = inst.actual_status == "running"
    has_run = inst.first_running_at is not None
    dlperf = machine.dlperf * n
    flops = machine.total_flops * n
    dph_total = inst.dph_total
    cost = {
        "gpuCostPerHour": inst.compute_dph,
        "diskHour": inst.storage_dph,
        "totalHour": dph_total,
        "discountTotalHour": 0.0,
        "discountedTotalPerHour": dph_total,
    }
    row: dict[str, Any] = {
        "id": inst.id,
        "actual_status": inst.actual_status,
        "intended_status": inst.intended_status,
        "cur_state": inst.cur_state,
        "next_state": inst.next_state,
        "status_msg": None if inst.status_msg is None else inst.status_msg + "\n",
        "label": inst.label,
        "machine_id": machine.machine_id,
        "host_id": machine.host_id,
        "bundle_id": inst.offer_id,
        "image_uuid": inst.image,
        "image_args": list(inst.args or []),
        "image_runtype": inst.runtype,
        "extra_env": [[k, v] for k, v in inst.env],
        "onstart": inst.onstart,
        "jupyter_token": inst.jupyter_token,
        "template_id": None,
        "template_hash_id": inst.template_hash_id,
        "template_name": None,
        "public_ipaddr": inst.public_ip + ("\n" if listing else ""),
        "local_ipaddrs": f"192.168.{machine.machine_id % 250}.{inst.id % 250 + 2} 172.17.0.1 \n",
        "ssh_host": f"ssh{inst.id % 9 + 1}.vast.ai" if has_run else None,
        "ssh_port": 10_000 + inst.id % 50_000 if has_run else None,
        "ssh_idx": str(inst.id % 9 + 1) if has_run else None,
        "machine_dir_ssh_port": inst.ports.get("22/tcp", -1) if has_run else -1,
        "direct_port_start": min(inst.ports.values()) if inst.ports else -1,
        "direct_port_end": max(inst.ports.values()) if inst.ports else -1,
        "direct_port_count": len(inst.ports),
        "start_date": inst.created_at,
        "end_date": inst.created_at + machine.max_duration_days * 86_400.0,
        "duration": max(0.0, now - inst.created_at),
        "uptime_mins": (now - inst.running_since) / 60.0
        if running and inst.running_since is not None
        else None,
        "num_gpus": n,
        "gpu_name": machine.gpu_name,
        "gpu_arch": machine.gpu_arch,
        "gpu_ram": int(machine.gpu_ram_gb * 1000),
        "gpu_totalram": int(machine.gpu_ram_gb * 1000) * n,
        "gpu_util": 0.0 if running else None,
        "gpu_temp": 35.0 if running else None,
        "gpu_frac": frac,
        "gpu_lanes": 16,
        "gpu_mem_bw": machine.gpu_mem_bw,
        "bw_nvlink": 0.0,
        "cpu_name": machine.cpu_name,
        "cpu_arch": machine.cpu_arch,
        "cpu_cores": machine.cpu_cores,
        "cpu_cores_effective": machine.cpu_cores * frac,
        "cpu_ram": int(machine.cpu_ram_gb * 1000),
        "cpu_util": 0.0 if running else None,
        "mem_limit": machine.cpu_ram_gb * frac if running else None,
        "mem_usage": 0.0 if running else None,
        "vmem_usage": 0.0 if running else None,
        "disk_space": inst.disk,
        "disk_usage": 0.0 if running else None,
        "disk_util": 0.0 if running else -1.0,
        "disk_bw": machine.disk_bw,
        "disk_name": machine.disk_name,
        "inet_up": machine.inet_up,
        "inet_down": machine.inet_down,
        "inet_up_cost": machine.inet_up_cost,
        "inet_down_cost": machine.inet_down_cost,
        "inet_up_billed": 0.0,
        "inet_down_billed": 0.0,
        "dph_base": inst.compute_dph,
        "dph_total": dph_total,
        "storage_cost": machine.storage_cost,
        "storage_total_cost": inst.storage_dph,
        "vram_costperhour": inst.compute_dph / max(1.0, machine.gpu_ram_gb * n),
        "min_bid": machine.bid_floor * n,
        "is_bid": inst.is_bid,
        "credit_balance": None,
        "credit_discount": None,
        "credit_discount_max": 0.0,
        "search": cost,
        "instance": {**cost, "gpuCostPerHour": 0.0 if not running else inst.compute_dph},
        "reliability2": machine.reliability,
        "score": score(dlperf, dph_total, machine.reliability),
        "dlperf": dlperf,
        "dlperf_per_dphtotal": dlperf / dph_total if dph_total else 0.0,
        "flops_per_dphtotal": flops / dph_total if dph_total else 0.0,
        "total_flops": flops,
        "geolocation": machine.geolocation,
        "country_code": machine.geolocation.strip()[-2:],
        "verification": machine.verification,
        "vericode": VERICODES.get(machine.verification, 0),
        "rentable": True,
        "static_ip": machine.static_ip,
        "hosting_type": machine.hosting_type,
        "external": False,
        "os_version": machine.os_version,
        "mobo_name": machine.mobo_name,
        "pci_gen": machine.pci_gen,
        "pcie_bw": machine.pcie_bw,
        "cuda_max_good": machine.cuda_max_good,
        "driver_version": machine.driver_version,
        "compute_cap": machine.compute_cap,
        "has_avx": 1,
        "logo": "/static/logos/vastai_small2.png",
        "webpage": None,
        "client_run_time": 0.0,
        "host_run_time": 0.0,
        "time_remaining": "",
        "time_remaining_isbid": "",
        "volume_info": [],
    }
    if running:
        row["ports"] = {
            key: [{"HostIp": "0.0.0.0", "HostPort": str(port)}]  # noqa: S104 - Docker's shape
            for key, port in inst.ports.items()
        }
    return row
