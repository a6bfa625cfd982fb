"""The desired state: one cluster spec as typed, immutable data.

These objects are built by `reconciler.spec` after the YAML has been validated and every default
filled in from the JSON Schema, so nothing here repeats a default or a floor: the schema is the one
place those numbers live. Keeping the model plain (no I/O, no validation) lets the planner and the
nets take it as an argument and stay pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from reconciler.model import rayversions

FilterValue = float | int | str | bool | None | tuple[float | int | str | bool, ...]
OfferFilters = Mapping[str, Mapping[str, FilterValue]]
# How Ray's demand picks a node type among those that fit it (a cluster's `scheduling`).
Scheduling = Literal["ray", "cheapest"]


@dataclass(frozen=True)
class OfferQuery:
    """The spec's part of an offer search; ray-vast adds its own filters and the fixed order."""

    filters: OfferFilters
    type: Literal["on-demand", "bid"]
    max_bid_dollars_per_hour: float | None
    min_reliability: float
    limit: int

    def price_floor(self) -> float | None:
        """The lowest `dph_total` the filters allow, if they bound it from below."""
        ops = {**self.filters.get("dph", {}), **self.filters.get("dph_total", {})}
        bounds = [ops[op] for op in ("gte", "gt", "eq") if op in ops]
        numbers = [float(b) for b in bounds if isinstance(b, int | float | str) and _is_number(b)]
        return max(numbers) if numbers else None


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class NodeShape:
    """The least a worker of one node type will have, as Ray counts it.

    `resources` uses Ray's names (`CPU`, `GPU`, `memory` and `object_store_memory` in bytes,
    custom ones) and holds only positive amounts, like `available_node_types.<type>.resources` in
    Ray's cluster YAML; `labels` are the Ray node labels every worker of the type carries.
    `sources` says, for each resource, where its amount came from (an offer filter's lower bound,
    `resources:`, or `ray_resources:`), so a message can tell the user what to change.
    """

    resources: Mapping[str, float]
    labels: Mapping[str, str]
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def has_cpu(self) -> bool:
        """Ray places a task only where it has CPU (tasks ask for one CPU unless told 0)."""
        return self.resources.get("CPU", 0.0) > 0


@dataclass(frozen=True)
class NodeType:
    """One kind of worker machine.

    `ray_resources` and `ray_labels` are what each worker advertises to Ray beyond its CPU, GPU
    and memory (the spec's `ray_resources` with the custom keys of `resources`, its `ray_labels`
    with `labels`); `shape` is what the planner assumes a worker has before it joins.
    `declared_resources` is the spec's `resources:` as written, amounts of 0 included (the shape
    leaves those out): its `CPU` and `GPU` are what each worker's Ray is started with, and a
    worker counts on its own what is not declared (reconciler/head/answers.py).
    """

    name: str
    min_workers: int
    max_workers: int
    offer: OfferQuery
    image: str
    disk_gb: float
    candidate_factor: int
    pull_limit_seconds: int
    agent: bool
    env: Mapping[str, str]
    ray_resources: Mapping[str, float]
    ray_labels: Mapping[str, str]
    shape: NodeShape
    declared_resources: Mapping[str, float] = field(default_factory=dict)
    # The node type's own money-chain windows (None: the cluster's watchdogs); read them through
    # `ClusterSpec.idle_windows`.
    idle_stop_after_seconds: int | None = None
    idle_destroy_after_seconds: int | None = None

    @cached_property
    def ray_fingerprint(self) -> str:
        """`rayversions.fingerprint` of this node type's image and env (kept: it is asked on
        every heartbeat and scan, and the spec never changes under it)."""
        return rayversions.fingerprint(self.image, self.env)

    @cached_property
    def digest(self) -> str:
        """The configuration a rental runs: image, env, disk and offer filters, hashed (the env
        may hold a user's secrets, which the records must not). The breaker's count and the
        blocklist entries a configuration fault explains belong to it (DESIGN.md 11): a user
        who changes any of these has changed what every candidate will do."""
        canonical = json.dumps(
            {
                "image": self.image,
                "env": dict(sorted(self.env.items())),
                "disk_gb": self.disk_gb,
                "filters": {k: dict(v) for k, v in sorted(self.offer.filters.items())},
                "min_reliability": self.offer.min_reliability,
            },
            sort_keys=True,
            default=list,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Provider:
    """Where machines are rented. The API key is never part of the spec."""

    type: Literal["vast", "vastsim"]
    url: str
    market: str | None


@dataclass(frozen=True)
class Head:
    """The machine that runs `ray-vast watch` and the Ray head."""

    address: str
    ray_port: int
    enroll_port: int
    heartbeat_port: int
    metrics_port: int
    dashboard_port: int = 8265

    @property
    def dashboard_url(self) -> str:
        """Where Ray's dashboard and Jobs API answer (`ray job submit --address ...`)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.dashboard_port}"


@dataclass(frozen=True)
class Watchdogs:
    """Thresholds, in seconds; see the schema for what each one ends."""

    heartbeat_interval_seconds: int
    worker_gives_up_after_seconds: int
    went_silent_after_seconds: int
    enrollment_limit_seconds: int
    candidate_self_destroy_seconds: int
    never_reported_seconds: int
    provision_deadline_seconds: int
    missing_from_listing_seconds: int
    lost_after_seconds: int
    orphan_grace_seconds: int
    idle_stop_after_seconds: int
    idle_destroy_after_seconds: int
    pool_idle_release_seconds: int
    queue_wait_timeout_seconds: int
    report_wait_seconds: int
    self_destroy_retry_seconds: int
    bootloader_give_up_seconds: int
    start_limit_seconds: int = 300


@dataclass(frozen=True)
class Cadences:
    """How often each watchdog runs, in seconds (DESIGN.md section 5)."""

    idle_scan_seconds: int
    auto_stop_seconds: int
    auto_destroy_seconds: int
    boot_failure_seconds: int
    provision_deadline_seconds: int
    went_silent_seconds: int
    lost_seconds: int
    orphan_sweep_seconds: int
    pool_idle_release_seconds: int
    queue_wait_seconds: int
    no_consumer_seconds: int
    stuck_dispatch_seconds: int
    reconcile_seconds: int


@dataclass(frozen=True)
class Breaker:
    """Rent-loop breaker: `slots` empty slots in a row pause a node type for `pause_seconds`
    (doubled for each opening in a row, at most `MAX_PAUSE_SECONDS`); a worker that ends with a
    failure report before serving `min_service_seconds` is such a slot (DESIGN.md 11)."""

    slots: int
    pause_seconds: int
    min_service_seconds: int = 600


@dataclass(frozen=True)
class Blocklist:
    """How long a host is skipped, by the reason it failed."""

    timeout: int
    network: int
    boot: int


@dataclass(frozen=True)
class SourceRef:
    """Where a cluster was declared, so every later message can point back at it."""

    file: str
    line: int


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster as declared."""

    name: str
    description: str
    provider: Provider
    head: Head
    max_dollars_per_hour: float
    node_types: Mapping[str, NodeType]
    watchdogs: Watchdogs
    cadences: Cadences
    breaker: Breaker
    blocklist: Blocklist
    allow_short_thresholds: bool
    source: SourceRef = field(compare=False)
    digest: str = ""
    # Ray's top-level max_workers: the most workers of the whole cluster (None: unbounded).
    max_workers: int | None = None
    # How a node type is picked among those that fit Ray's demand: "ray" (Ray's own utilisation
    # score) or "cheapest" (the least $ per request served; planning/cheapest.py).
    scheduling: Scheduling = "ray"
    # The document as loaded (JSON, defaults filled): kept with the cluster's record when it is
    # applied, so `status` with no spec directory knows what the controller last applied.
    document: str = field(default="", compare=False, repr=False)

    def idle_windows(self, node_type: str) -> tuple[int, int]:
        """(stop after, destroy after) quiet seconds for a worker of this node type: its own
        windows where declared (Ray users tune idle per worker group, as KubeRay's
        idleTimeoutSeconds), else the cluster's; a type no longer declared gets the cluster's."""
        w = self.watchdogs
        declared = self.node_types.get(node_type)
        if declared is None:
            return w.idle_stop_after_seconds, w.idle_destroy_after_seconds
        return (
            declared.idle_stop_after_seconds or w.idle_stop_after_seconds,
            declared.idle_destroy_after_seconds or w.idle_destroy_after_seconds,
        )
