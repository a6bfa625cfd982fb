"""The market: machines, their GPUs, and the offers that free GPUs make.

A machine is what a host lists: GPUs, cores, RAM, disk, network, price, reliability, where it is,
which images it already holds and how fast it pulls the others, and traits that make it fail.
Offers are not stored: they are derived from the GPUs that are free right now, so renting consumes
them and destroying gives them back. An offer id names one bundle of free GPUs on one machine; any
change to a machine's free GPUs retires all of its offer ids, which is why an offer found a moment
ago can answer `no_such_ask`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

EXTERNAL_OWNER = -1
"""Owner id of GPUs rented by somebody outside the simulation (another vast customer)."""


@dataclass(frozen=True)
class Traits:
    """Ways a host misbehaves. `*_at` is seconds after the simulation starts; `*_after` is seconds
    after each rental on the machine first runs."""

    never_boots: bool = False
    oci_failure: bool = False
    offline_at: float | None = None
    offline_after: float | None = None
    ip_change_at: float | None = None
    ip_change_after: float | None = None
    outbid_at: float | None = None
    outbid_after: float | None = None


@dataclass
class Machine:
    """One host machine as listed on the market, plus its live allocation state.

    Prices: `dph_base` and `min_bid` are $/h for ONE GPU; an offer of k GPUs costs k times that.
    `storage_cost` is $/GB/month, billed as disk x storage_cost / 720 per hour.
    """

    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    dph_base: float
    storage_cost: float = 0.15
    min_bid: float | None = None
    gpu_ram_gb: float = 24.0
    gpu_arch: str = "nvidia"
    compute_cap: int = 890
    cuda_max_good: float = 12.4
    driver_version: str = "550.127.05"
    dlperf: float = 50.0
    total_flops: float = 80.0
    gpu_mem_bw: float = 900.0
    gpu_max_power: float = 450.0
    cpu_name: str = "AMD EPYC 7543 32-Core Processor"
    cpu_arch: str = "amd64"
    cpu_cores: int = 32
    cpu_ghz: float = 3.0
    cpu_ram_gb: float = 128.0
    disk_gb: float = 500.0
    disk_bw: float = 2000.0
    disk_name: str = "Samsung SSD 980 PRO 2TB"
    inet_up: float = 500.0
    inet_down: float = 900.0
    inet_up_cost: float = 0.005
    inet_down_cost: float = 0.002
    direct_port_count: int = 100
    pcie_bw: float = 25.0
    pci_gen: float = 4.0
    mobo_name: str = "ROME2D16-2T"
    os_version: str = "22.04"
    reliability: float = 0.99
    verification: str = "verified"
    geolocation: str = "Texas, US"
    hosting_type: int = 0
    static_ip: bool = False
    public_ip: str = ""
    rentable: bool = True
    min_gpus: int = 1
    max_duration_days: float = 30.0
    cached_images: tuple[str, ...] = ()
    pull_speed_mbps: float = 100.0
    traits: Traits = field(default_factory=Traits)

    # live state (not part of a market file)
    gpu_owner: list[int | None] = field(init=False, repr=False)
    disk_used: dict[int, float] = field(init=False, repr=False)
    cache: set[str] = field(init=False, repr=False)
    offline: bool = field(init=False, default=False)
    ip: str = field(init=False, default="")

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise ValueError(f"machine {self.machine_id}: num_gpus must be at least 1")
        if self.min_bid is None:
            self.min_bid = round(self.dph_base * 0.5, 6)
        if not self.public_ip:
            self.public_ip = default_ip(self.machine_id)
        self.gpu_owner = [None] * self.num_gpus
        self.disk_used = {}
        self.cache = set(self.cached_images)
        self.ip = self.public_ip

    @property
    def bid_floor(self) -> float:
        """Current minimum bid for one GPU."""
        return self.min_bid if self.min_bid is not None else self.dph_base * 0.5

    def free_gpus(self) -> list[int]:
        return [i for i, owner in enumerate(self.gpu_owner) if owner is None]

    def disk_free(self) -> float:
        return max(0.0, self.disk_gb - sum(self.disk_used.values()))

    def storage_dph(self, disk_gb: float) -> float:
        """$/h of storage for `disk_gb` GB on this machine."""
        return disk_gb * self.storage_cost / 720.0


def default_ip(machine_id: int) -> str:
    """A documentation-range address (RFC 5737) derived from the machine id."""
    return f"203.0.{(machine_id // 250) % 250 + 1}.{machine_id % 250 + 1}"


@dataclass(frozen=True)
class Bundle:
    """One offer: some free GPUs of one machine."""

    offer_id: int
    machine: Machine
    gpu_ids: tuple[int, ...]

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_ids)


class NoSuchAsk(LookupError):
    """The offer id names no bundle of free GPUs (never existed, rented, or retired)."""


MACHINE_KEYS = frozenset(f.name for f in dataclasses.fields(Machine) if f.init)
TRAIT_KEYS = frozenset(f.name for f in dataclasses.fields(Traits))


class Market:
    """The machines of the simulated vast.ai and the offers their free GPUs make."""

    def __init__(
        self,
        machines: Iterable[Machine],
        *,
        images: Mapping[str, float] | None = None,
        default_image_gb: float = 8.0,
        images_without_ray: frozenset[str] = frozenset(),
        first_offer_id: int = 4_000_001,
    ) -> None:
        self.machines: dict[int, Machine] = {}
        for machine in machines:
            if machine.machine_id in self.machines:
                raise ValueError(f"duplicate machine_id {machine.machine_id}")
            self.machines[machine.machine_id] = machine
        self.images: dict[str, float] = dict(images or {})
        self.default_image_gb = default_image_gb
        # Images whose `ray` cannot start (not installed): a container of one runs, its agent
        # enrolls, and its Ray start fails at once (issue 21's "image without ray").
        self.images_without_ray = frozenset(images_without_ray)
        self._next_offer_id = first_offer_id
        self._bundles: dict[int, Bundle] = {}
        self._by_machine: dict[int, list[int]] = {}
        for machine in self.machines.values():
            self.refresh(machine)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def default(cls) -> Market:
        """The market that ships with the package (`vastsim/data/market.yaml`)."""
        text = resources.files("vastsim").joinpath("data/market.yaml").read_text("utf-8")
        return cls.from_dict(yaml.safe_load(text))

    @classmethod
    def from_yaml(cls, path: str | Path) -> Market:
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(yaml.safe_load(handle))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Market:
        """Build a market from the parsed YAML format (see `vastsim/data/market.yaml`)."""
        known = {"images", "default_image_gb", "defaults", "machines", "images_without_ray"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown market keys: {sorted(unknown)}")
        defaults = dict(data.get("defaults") or {})
        machines = [
            machine_from_dict({**defaults, **entry}) for entry in data.get("machines") or []
        ]
        images = {str(k): float(v) for k, v in (data.get("images") or {}).items()}
        return cls(
            machines,
            images=images,
            default_image_gb=float(data.get("default_image_gb", 8.0)),
            images_without_ray=frozenset(str(i) for i in data.get("images_without_ray") or ()),
        )

    # -- queries ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Machine]:
        return iter(self.machines.values())

    def machine(self, machine_id: int) -> Machine:
        return self.machines[machine_id]

    def image_size_gb(self, image: str) -> float:
        return self.images.get(image, self.default_image_gb)

    def gpu_names(self) -> list[str]:
        return sorted({m.gpu_name for m in self.machines.values()})

    def bundles(self) -> list[Bundle]:
        """Every current offer, in offer-id order."""
        return [self._bundles[k] for k in sorted(self._bundles)]

    def bundle(self, offer_id: int) -> Bundle:
        try:
            return self._bundles[offer_id]
        except KeyError:
            raise NoSuchAsk(offer_id) from None

    # -- allocation ---------------------------------------------------------------------------

    def take(self, offer_id: int, owner: int) -> Bundle:
        """Rent the GPUs of an offer for `owner`; the machine's offers are retired."""
        bundle = self.bundle(offer_id)
        self.assign(bundle.machine, bundle.gpu_ids, owner)
        return bundle

    def assign(self, machine: Machine, gpu_ids: Iterable[int], owner: int) -> bool:
        """Give `gpu_ids` to `owner` if they are all free; False when any is taken."""
        ids = list(gpu_ids)
        if any(machine.gpu_owner[i] not in (None, owner) for i in ids):
            return False
        for i in ids:
            machine.gpu_owner[i] = owner
        self.refresh(machine)
        return True

    def release(self, machine: Machine, owner: int) -> None:
        """Free every GPU that `owner` holds on `machine`."""
        changed = False
        for i, held_by in enumerate(machine.gpu_owner):
            if held_by == owner:
                machine.gpu_owner[i] = None
                changed = True
        if changed:
            self.refresh(machine)

    def occupy(self, machine_id: int, count: int | None = None) -> list[int]:
        """Somebody outside the simulation rents `count` free GPUs (all when None)."""
        machine = self.machines[machine_id]
        free = machine.free_gpus()
        taken = free if count is None else free[:count]
        for i in taken:
            machine.gpu_owner[i] = EXTERNAL_OWNER
        self.refresh(machine)
        return taken

    def vacate(self, machine_id: int) -> None:
        """The outside tenant leaves."""
        self.release(self.machines[machine_id], EXTERNAL_OWNER)

    def refresh(self, machine: Machine) -> None:
        """Retire the machine's offers and derive new ones from its free GPUs."""
        for offer_id in self._by_machine.pop(machine.machine_id, []):
            self._bundles.pop(offer_id, None)
        if machine.offline or not machine.rentable:
            return
        free = machine.free_gpus()
        ids: list[int] = []
        for size in bundle_sizes(machine.num_gpus, len(free), machine.min_gpus):
            bundle = Bundle(self._next_offer_id, machine, tuple(free[:size]))
            self._bundles[bundle.offer_id] = bundle
            ids.append(bundle.offer_id)
            self._next_offer_id += 1
        self._by_machine[machine.machine_id] = ids


def bundle_sizes(num_gpus: int, free: int, min_gpus: int) -> list[int]:
    """Offer sizes for a machine: powers of two up to the free count, plus a whole-machine
    offer when every GPU is free."""
    sizes = []
    size = 1
    while size <= free:
        if size >= min_gpus:
            sizes.append(size)
        size *= 2
    if free == num_gpus and num_gpus not in sizes and num_gpus >= min_gpus:
        sizes.append(num_gpus)
    return sizes


def machine_from_dict(entry: Mapping[str, Any]) -> Machine:
    """One machine from its market-file mapping; unknown keys are an error (they are typos)."""
    unknown = set(entry) - MACHINE_KEYS
    if unknown:
        raise ValueError(f"machine {entry.get('machine_id')}: unknown keys {sorted(unknown)}")
    values = dict(entry)
    traits = values.pop("traits", None) or {}
    bad = set(traits) - TRAIT_KEYS
    if bad:
        raise ValueError(f"machine {entry.get('machine_id')}: unknown traits {sorted(bad)}")
    values["cached_images"] = tuple(values.get("cached_images") or ())
    return Machine(**values, traits=Traits(**traits))


STANDARD_IMAGES: dict[str, float] = {
    "rayproject/ray:2.60.0-py311-cpu": 2.4,
    "rayproject/ray:2.60.0-py311-cu124": 18.0,
    "pytorch/pytorch:latest": 8.5,
    "vastai/base-image:@vastai-automatic-tag": 6.0,
}
"""Sizes (GB) of well-known images, used by generated markets (`vastsim.generate`)."""
