"""A node type's shape: the least a worker of it will have, as Ray counts it (DESIGN.md 10).

Ray's autoscaler plans with `available_node_types.<type>.resources`; ray-vast plans with the same
thing, taken from the offer filters unless the spec declares it (`resources:`, `labels:`):

- `CPU` is the lower bound of `cpu_cores_effective`, rounded down and at least 1, because that is
  what the agent starts Ray with (the container's cgroup quota, rounded down; `agent/cores.py`).
  `cpu_cores` is the host's count, not the container's, so it bounds nothing.
- `GPU` is the lower bound of `num_gpus` (the GPUs the instance is given), when it is above 0.
- `memory` and `object_store_memory` split the lower bound of `cpu_ram` (MB, read as 10^6 bytes,
  which is below a MiB, so the bound stays a lower bound) the way Ray splits a node's memory by
  default: 30% object store, at most 200 GB, the rest for tasks. It is an estimate: Ray counts
  the memory free when it starts; declare `memory` when tasks ask for it.
- custom resources are `ray_resources` (what every worker advertises) and the custom keys of
  `resources:`; labels are `ray_labels`, `labels:` and the two the head gives every worker of the
  type (`rv_cluster`, `rv_node_type`; `rv_record` and `rv_slot` differ per worker).
- a `gpu_name` filter that allows one card (or cards Ray names alike) gives what Ray gives a node
  with that GPU: the label `ray.io/accelerator-type` and the resource `accelerator_type:<name>`
  (1), Ray's name of the card (`model/accelerators.py`), so `accelerator_type=` and label
  selectors on it pack onto the node type.

The lower bound of one filter is the least value its operators allow: `eq` and `gte` bound it,
`gt` bounds it strictly (the next whole number for a whole-number field, else the bound itself,
which rounding down makes exact), `in` its least member that the other operators allow. A key of
`resources:` wins over the derived amount; an amount of 0 removes the resource, as Ray omits it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from types import MappingProxyType

from reconciler.model.accelerators import (
    ACCELERATOR_LABEL,
    ACCELERATOR_RESOURCE_PREFIX,
    accelerator_type,
)
from reconciler.model.demand import NODE_TYPE_LABEL
from reconciler.model.spec import FilterValue, NodeShape, OfferFilters

BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
BYTES_PER_MB = 1_000_000
# Ray's defaults (ray_constants.DEFAULT_OBJECT_STORE_MEMORY_PROPORTION and _MAX_MEMORY_BYTES),
# in whole bytes so a bound in MB splits exactly.
OBJECT_STORE_PERCENT = 30
OBJECT_STORE_MAX_BYTES = 200 * 10**9
# The labels the head puts on every worker of a node type (reconciler/head/answers.py).
CLUSTER_LABEL = "rv_cluster"
# Filters that say the node type is about GPUs even when `num_gpus` has no lower bound.
GPU_FILTERS = ("gpu_name", "gpu_ram", "gpu_total_ram", "gpu_arch", "compute_cap")
COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
WHOLE_NUMBER_FILTERS = frozenset(
    {"num_gpus", "cpu_cores", "direct_port_count", "machine_id", "host_id"}
)


def derive(
    *,
    cluster: str,
    node_type: str,
    filters: OfferFilters,
    ray_resources: Mapping[str, float],
    ray_labels: Mapping[str, str],
    declared_resources: Mapping[str, float] | None,
    declared_labels: Mapping[str, str] | None,
) -> NodeShape:
    """The shape of one node type from its (schema-valid) spec fields."""
    resources: dict[str, float] = {}
    sources: dict[str, str] = {}

    def put(name: str, amount: float, source: str) -> None:
        resources[name] = amount
        sources[name] = source

    cores = filter_bound(filters, "cpu_cores_effective")
    if cores is not None:
        put("CPU", float(max(1, math.floor(cores + 1e-9))), _said("cpu_cores_effective", cores))
    gpus = filter_bound(filters, "num_gpus")
    if gpus is not None and gpus >= 1:
        put("GPU", float(math.floor(gpus)), _said("num_gpus", gpus))
    ram_mb = filter_bound(filters, "cpu_ram")
    if ram_mb is not None and ram_mb > 0:
        total = math.floor(ram_mb * BYTES_PER_MB)
        store = min(total * OBJECT_STORE_PERCENT // 100, OBJECT_STORE_MAX_BYTES)
        said = _said("cpu_ram", ram_mb, unit=" MB")
        put("memory", float(total - store), f"{said}, Ray's default split")
        put("object_store_memory", float(store), f"{said}, Ray's default split")
    for name, amount in ray_resources.items():
        put(name, float(amount), f"ray_resources.{name}")
    for name, amount in (declared_resources or {}).items():
        put(name, float(amount), f"resources.{name}")
    accelerator = filter_accelerator(filters)
    if accelerator is not None:
        put(f"{ACCELERATOR_RESOURCE_PREFIX}{accelerator}", 1.0, "gpu_name, as Ray names the card")
    positive = {k: v for k, v in resources.items() if v > 0}
    labels = {**ray_labels, **(declared_labels or {})}
    labels[CLUSTER_LABEL] = cluster
    labels[NODE_TYPE_LABEL] = node_type
    if accelerator is not None:
        labels[ACCELERATOR_LABEL] = accelerator
    return NodeShape(
        resources=MappingProxyType(positive),
        labels=MappingProxyType(labels),
        sources=MappingProxyType({k: v for k, v in sources.items() if k in positive}),
    )


def filter_accelerator(filters: OfferFilters) -> str | None:
    """Ray's accelerator type of the GPU every offer the `gpu_name` filter allows has: its `eq`
    name, or the one name all its `in` names share (None when they differ, or with no filter)."""
    ops = filters.get("gpu_name") or {}
    named = ops.get("eq")
    names = (named,) if isinstance(named, str) else ops.get("in")
    if not isinstance(names, tuple) or not names:
        return None
    types = {accelerator_type(str(n)) for n in names}
    return types.pop() if len(types) == 1 else None


def advertised_resources(
    ray_resources: Mapping[str, float], declared_resources: Mapping[str, float] | None
) -> dict[str, float]:
    """What each worker advertises beyond its CPU, GPU and memory: `ray_resources` with the
    custom keys of `resources:` (a conflict between the two is an error of `spec.checks`)."""
    custom = {
        k: float(v) for k, v in (declared_resources or {}).items() if k not in BUILTIN_RESOURCES
    }
    return {**{k: float(v) for k, v in ray_resources.items()}, **custom}


def filter_bound(filters: OfferFilters, field: str) -> float | None:
    """The lower bound the filters put on one vast field, if any."""
    ops = filters.get(field)
    if not ops:
        return None
    return lower_bound(ops, whole=field in WHOLE_NUMBER_FILTERS)


def lower_bound(ops: Mapping[str, FilterValue], *, whole: bool) -> float | None:
    """The least value that the operators of one filter allow (None: unbounded below)."""
    lows = [v for v in (_number(ops.get("eq")), _number(ops.get("gte"))) if v is not None]
    strict = _number(ops.get("gt"))
    if strict is not None:
        lows.append(float(math.floor(strict) + 1) if whole else strict)
    low = max(lows) if lows else None
    if whole and low is not None:
        low = float(math.ceil(low))
        excluded = _numbers(ops.get("notin")) | _numbers((ops.get("neq"),))
        for _ in range(len(excluded)):
            if low in excluded:
                low += 1
    members = ops.get("in")
    if isinstance(members, tuple):
        allowed = sorted(
            n for n in _numbers(members) if (low is None or n >= low) and _allowed(n, ops)
        )
        return allowed[0] if allowed else low
    return low


def _allowed(value: float, ops: Mapping[str, FilterValue]) -> bool:
    """Whether `value` passes every operator of the filter but `in`."""
    for op, test in COMPARISONS.items():
        bound = _number(ops.get(op))
        if bound is not None and not test(value, bound):
            return False
    return value not in _numbers(ops.get("notin"))


def _numbers(values: object) -> set[float]:
    if not isinstance(values, tuple):
        return set()
    return {n for n in (_number(v) for v in values) if n is not None}


def _number(value: object) -> float | None:
    """A finite number from a filter value (booleans and text are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _said(field: str, bound: float, *, unit: str = "") -> str:
    shown = int(bound) if bound.is_integer() else bound
    return f"offer.filters.{field} (at least {shown}{unit})"
