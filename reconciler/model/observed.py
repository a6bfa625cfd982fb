"""What vast.ai shows us, and the shapes of what we ask of it.

These are plain frozen dataclasses: the vast client (`reconciler.vast`) turns wire rows into them,
the planner and the nets read them, and nobody mutates them. They hold no I/O and no httpx, so the
pure core (`model/`, `planning/`, `nets/`) can use them freely.

Two directions live here because both are the provider's vocabulary:

- observations: `Offer` (a row of a search), `Instance` (a row of the listing or of a show),
  `CreatedInstance` (the answer to a create);
- requests: `OfferSearch` (a search as structured data) and `CreateRequest` (what to rent it with).

Conventions taken from the wire (see `reference/vast-api.md`): money is $/h (`dph_*`) or $/GB/month
(`storage_cost`); `gpu_ram` and `cpu_ram` are MB; `disk_space` is GB; times are float epoch seconds.
Strings arrive with trailing newlines and are stripped by the parser; an empty string is `None`.
A field vast may leave out or send as null is `Optional`. Secrets (the instance key, environment
values that may carry join tokens) are kept out of `repr`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal, get_args

FilterOp = Literal["eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"]
FILTER_OPS: frozenset[str] = frozenset(get_args(FilterOp))
OfferType = Literal["on-demand", "bid"]
Scalar = str | int | float | bool | None
FilterValue = Scalar | tuple[Scalar, ...]

# Top-level keys of a search body that are not field filters; a filter may not shadow them.
SEARCH_CONTROL_KEYS: frozenset[str] = frozenset(
    {"order", "type", "limit", "allocated_storage", "disable_bundling"}
)


@dataclasses.dataclass(frozen=True)
class Offer:
    """One rentable bundle from a search (`POST /api/v0/bundles/`).

    `id` is what a create rents. `dph_total` includes the storage term priced at the search's
    `allocated_storage`; `min_bid` is the floor for an interruptible rental.
    """

    id: int
    machine_id: int
    host_id: int
    dph_total: float
    gpu_name: str | None = None
    num_gpus: int | None = None
    gpu_ram: int | None = None
    cpu_cores: int | None = None
    cpu_cores_effective: float | None = None
    cpu_ram: int | None = None
    disk_space: float | None = None
    dph_base: float | None = None
    storage_cost: float | None = None
    min_bid: float | None = None
    reliability: float | None = None
    verification: str | None = None
    geolocation: str | None = None
    cuda_max_good: float | None = None
    direct_port_count: int | None = None
    inet_down: float | None = None
    inet_up: float | None = None
    rentable: bool | None = None
    rented: bool | None = None
    hosting_type: int | None = None
    compute_cap: int | None = None
    static_ip: bool | None = None


@dataclasses.dataclass(frozen=True)
class Instance:
    """One instance as the listing (`GET /api/v1/instances/`) or a show reports it.

    `actual_status` is `None` while vast provisions it. `ports` maps a container port with its
    protocol (`"22/tcp"`) to the host port reachable at `public_ipaddr`; it is empty until the
    instance runs. `start_date` is vast's, not ours: boot windows run from our first observation.
    """

    id: int
    label: str | None = None
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    next_state: str | None = None
    status_msg: str | None = None
    public_ipaddr: str | None = None
    # Typed read-only; held as a private dict copy so `dataclasses.asdict` and pickling work.
    ports: Mapping[str, int] = dataclasses.field(default_factory=dict, hash=False)
    machine_id: int | None = None
    host_id: int | None = None
    dph_total: float | None = None
    dph_base: float | None = None
    storage_cost: float | None = None
    disk_space: float | None = None
    start_date: float | None = None
    # Minutes since it last began running (vast's own clock; None while it does not run).
    uptime_mins: float | None = None
    image: str | None = None
    num_gpus: int | None = None
    gpu_name: str | None = None
    cpu_cores_effective: float | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    is_bid: bool | None = None
    min_bid: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ports", dict(self.ports))


@dataclasses.dataclass(frozen=True)
class CreatedInstance:
    """The answer to a create: the new instance's id and its instance-scoped API key.

    The key is what vast injects into the container as `CONTAINER_API_KEY`; it is a secret, so it
    stays out of `repr`. Old API versions do not return it (`None`).
    """

    instance_id: int
    instance_api_key: str | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True)
class Filter:
    """One condition of an offer search: `field op value`, with vast's operator names."""

    field: str
    op: FilterOp
    value: FilterValue

    def __post_init__(self) -> None:
        _as_op(self.op)
        if self.field in SEARCH_CONTROL_KEYS or not self.field:
            raise ValueError(f"{self.field!r} is not a filterable offer field")
        listy = self.op in ("in", "notin")
        if listy != isinstance(self.value, tuple):
            raise ValueError(f"{self.field} {self.op}: 'in'/'notin' take a tuple, others a scalar")


@dataclasses.dataclass(frozen=True)
class OfferSearch:
    """An offer search as data, as sent to vast (the spec's `model.spec.OfferQuery` plus ray-vast's
    own filters). The order is not part of it: ray-vast always sorts by `dph_total` ascending, and
    users cannot change that.

    `allocated_storage` (GB) is the disk the search prices into `dph_total`; pass the disk the
    create will ask for, so the price searched is the price billed.
    """

    filters: tuple[Filter, ...] = ()
    type: OfferType = "on-demand"
    limit: int = 100
    allocated_storage: float = 10.0

    def __post_init__(self) -> None:
        if self.type not in get_args(OfferType):
            raise ValueError(f"offer type must be one of {get_args(OfferType)}, not {self.type!r}")
        if self.limit < 1:
            raise ValueError("limit must be at least 1")
        if self.allocated_storage <= 0:
            raise ValueError("allocated_storage must be positive")

    @classmethod
    def of(
        cls,
        filters: Mapping[str, Mapping[str, FilterValue | list[Scalar]]],
        *,
        type: OfferType = "on-demand",
        limit: int = 100,
        allocated_storage: float = 10.0,
    ) -> OfferSearch:
        """Build a query from vast's own shape, `{field: {op: value}}`."""
        parsed = tuple(
            Filter(field, _as_op(op), tuple(value) if isinstance(value, list) else value)
            for field, ops in filters.items()
            for op, value in ops.items()
        )
        return cls(parsed, type=type, limit=limit, allocated_storage=allocated_storage)


def _as_op(op: str) -> FilterOp:
    if op not in FILTER_OPS:
        raise ValueError(f"unknown filter operator {op!r}; use one of {sorted(FILTER_OPS)}")
    return op  # type: ignore[return-value]  # checked against the Literal's members above


@dataclasses.dataclass(frozen=True)
class CreateRequest:
    """What to run on a rented offer.

    The container runs with vast's `runtype: "args"`: the image's entrypoint with `args`, so the
    bootloader is PID 1. `ports` become `-p P:P` entries of vast's env object (TCP); `bid_price`
    ($/h for the machine) makes the rental interruptible. `label` is how a lost create response is
    found again in the listing, so it is required.
    """

    image: str
    disk_gb: float
    label: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False, hash=False)
    ports: tuple[int, ...] = ()
    args: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    onstart: str | None = dataclasses.field(default=None, repr=False)
    bid_price: float | None = None

    def __post_init__(self) -> None:
        if not self.label.strip():
            raise ValueError("a create needs a label: it is how a lost response is found again")
        if self.disk_gb <= 0:
            raise ValueError("disk_gb must be positive")
        if self.bid_price is not None and self.bid_price <= 0:
            raise ValueError("bid_price must be positive")
        for port in self.ports:
            # vast maps ports >= 70000 one-to-one ("identity mappings"), so they are valid too.
            if not 1 <= port <= 99_999:
                raise ValueError(f"port {port} is out of range")
        object.__setattr__(self, "env", dict(self.env))
