"""Semantic checks: what a JSON Schema cannot say about a cluster spec.

Each check is a small function that reads a built cluster (and the filled document for positions)
and appends diagnostics. They run only on documents that passed the schema, so they can trust
types and keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from reconciler import rayruntime
from reconciler.model import rayversions
from reconciler.model.diagnostics import Diagnostics
from reconciler.model.rayversions import RayVersions
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.spec import shapes
from reconciler.spec.schema import floors
from reconciler.spec.yamlread import JsonPath, Positions

# Variables the agent and vast set in the container; a spec may not shadow them.
RESERVED_ENV = ("VAST_API_KEY", "CONTAINER_API_KEY", "CONTAINER_ID", "PUBLIC_IPADDR")
RESERVED_ENV_PREFIXES = ("RV_", "VAST_TCP_PORT_", "VAST_UDP_PORT_")

# Names the head or Ray itself gives every node; a spec may not declare them.
RESERVED_LABEL_PREFIXES = ("rv_", "ray.io/")
RESERVED_LABELS_WHY = (
    "ray-vast sets rv_cluster, rv_node_type, rv_record and rv_slot on every worker; Ray owns the"
    " ray.io/ labels, and ray-vast derives ray.io/accelerator-type from the offer's gpu_name"
    " filter as Ray names the card (gpu_name: {eq: A100 SXM4} gives A100)"
)
RESERVED_RESOURCE_PREFIXES = ("rv-slot-", "node:", "accelerator_type:")

Check = Callable[[ClusterSpec, dict[str, Any], Positions, Diagnostics], None]


def check_cluster(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    for check in CHECKS:
        check(cluster, doc, positions, diags)


def check_across(loaded: Iterable[tuple[ClusterSpec, Any, Positions]], diags: Diagnostics) -> None:
    """Checks between documents: a cluster name may be declared only once."""
    first_seen: dict[str, Positions] = {}
    for cluster, _, positions in loaded:
        name_path: JsonPath = ("metadata", "name")
        if cluster.name in first_seen:
            first = first_seen[cluster.name].at(name_path)
            diags.error(
                f"cluster {cluster.name!r} is declared twice",
                positions.at(name_path),
                detail=f"first declared at {first.file}:{first.line}",
            )
        else:
            first_seen[cluster.name] = positions


def check_workers(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    for name, node_type in cluster.node_types.items():
        if node_type.min_workers > node_type.max_workers:
            diags.error(
                f"min_workers ({node_type.min_workers}) is more than "
                f"max_workers ({node_type.max_workers})",
                positions.at(("spec", "node_types", name, "min_workers")),
            )


def check_cluster_max(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    """Ray's rule: the global max_workers is at least the sum of every type's min_workers."""
    if cluster.max_workers is None:
        return
    floor = sum(t.min_workers for t in cluster.node_types.values())
    if floor > cluster.max_workers:
        diags.error(
            f"max_workers ({cluster.max_workers}) is less than the node types' min_workers "
            f"together ({floor})",
            positions.at(("spec", "max_workers")),
            detail="Ray refuses this config too: the global max_workers bounds every worker",
        )


def check_floors(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    if cluster.allow_short_thresholds:
        return
    for pattern, floor in floors():
        for path, value in _matching(doc, pattern):
            if isinstance(value, int | float) and value < floor:
                diags.error(
                    f"{path[-1]} is {value}, under its floor of {floor}",
                    positions.at(path),
                    detail="floors keep a misconfiguration from ending healthy machines",
                )


def check_testing(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    if cluster.allow_short_thresholds and cluster.provider.type != "vastsim":
        diags.error(
            "allow_short_thresholds is accepted only with provider.type: vastsim",
            positions.at(("spec", "testing", "allow_short_thresholds")),
        )
    if cluster.provider.market is not None and cluster.provider.type != "vastsim":
        diags.error(
            "provider.market is only for provider.type: vastsim",
            positions.at(("spec", "provider", "market")),
        )


def _check_idle_order(
    stop: int, destroy: int, at: JsonPath, positions: Positions, diags: Diagnostics, *, which: str
) -> None:
    if destroy <= stop:
        diags.error(
            f"idle_destroy_after_seconds ({destroy}) must be after "
            f"idle_stop_after_seconds ({stop}){which}",
            positions.at(at),
            detail="stop is reversible and destroy is not, so stop must come first",
        )


def check_timers(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    w = cluster.watchdogs
    base: JsonPath = ("spec", "watchdogs")
    _check_idle_order(
        w.idle_stop_after_seconds,
        w.idle_destroy_after_seconds,
        (*base, "idle_destroy_after_seconds"),
        positions,
        diags,
        which="",
    )
    for name, node_type in cluster.node_types.items():
        if node_type.idle_stop_after_seconds or node_type.idle_destroy_after_seconds:
            stop, destroy = cluster.idle_windows(name)
            key = (
                "idle_destroy_after_seconds"
                if node_type.idle_destroy_after_seconds
                else "idle_stop_after_seconds"
            )
            at: JsonPath = ("spec", "node_types", name, key)
            _check_idle_order(stop, destroy, at, positions, diags, which=f" (node type {name})")
    for name in ("worker_gives_up_after_seconds", "went_silent_after_seconds"):
        value = getattr(w, name)
        if value <= 2 * w.heartbeat_interval_seconds:
            diags.error(
                f"{name} ({value}) must be more than two heartbeats "
                f"({2 * w.heartbeat_interval_seconds})",
                positions.at((*base, name)),
                detail="otherwise one late heartbeat ends a healthy worker",
            )


def check_ports(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    seen: dict[int, str] = {}
    for name in ("ray_port", "enroll_port", "heartbeat_port", "metrics_port", "dashboard_port"):
        port = getattr(cluster.head, name)
        if port in seen:
            # Point at whichever of the two the user wrote; the other may be a default.
            written = name if ("spec", "head", name) in positions.keys else seen[port]
            diags.error(
                f"head.{name} {port} clashes with head.{seen[port]}",
                positions.at(("spec", "head", written)),
            )
        else:
            seen[port] = name


def check_budget(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    """min_workers at the cheapest price the filters allow must fit the budget."""
    need = 0.0
    parts = []
    for name, node_type in cluster.node_types.items():
        floor = node_type.offer.price_floor()
        if floor is not None and node_type.min_workers:
            need += floor * node_type.min_workers
            parts.append(f"{name}: {node_type.min_workers} x ${floor:.2f}/h")
    if need > cluster.max_dollars_per_hour:
        diags.error(
            f"max_dollars_per_hour {cluster.max_dollars_per_hour:.2f} cannot fit min_workers "
            f"at the cheapest allowed price (${need:.2f}/h)",
            positions.at(("spec", "max_dollars_per_hour")),
            detail="; ".join(parts),
        )


def check_node_types(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    for name, node_type in cluster.node_types.items():
        base: JsonPath = ("spec", "node_types", name)
        if node_type.offer.max_bid_dollars_per_hour is not None and node_type.offer.type != "bid":
            diags.error(
                "max_bid_dollars_per_hour needs offer.type: bid",
                positions.at((*base, "offer", "max_bid_dollars_per_hour")),
            )
        for key in node_type.env:
            if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
                diags.error(
                    f"env {key!r} is reserved for vast and the ray-vast agent",
                    positions.at((*base, "env", key), prefer_key=True),
                )


def check_shapes(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    """What the planner assumes a worker has (DESIGN.md 10): said when it cannot be derived,
    and refused when the spec says two things at once."""
    for name, node_type in cluster.node_types.items():
        base: JsonPath = ("spec", "node_types", name)
        body = doc["spec"]["node_types"][name]
        _check_declared(name, body, base, positions, diags)
        _check_cpu(node_type, body, base, positions, diags)
        _check_gpu(node_type, body, base, positions, diags)
        _check_overclaim(node_type, body, base, positions, diags)


def _check_declared(
    name: str, body: dict[str, Any], base: JsonPath, positions: Positions, diags: Diagnostics
) -> None:
    for key, amount in (body.get("resources") or {}).items():
        where = positions.at((*base, "resources", key), prefer_key=True)
        if key.startswith(RESERVED_RESOURCE_PREFIXES):
            diags.error(
                f"resource {key!r} is reserved",
                where,
                detail="ray-vast gives each worker its rv-slot-<slot> resource; Ray names "
                "node:<address> and accelerator_type:<type> itself",
            )
        elif key in body["ray_resources"] and float(body["ray_resources"][key]) != float(amount):
            diags.error(
                f"resources.{key} is {amount} but ray_resources.{key} is "
                f"{body['ray_resources'][key]}",
                where,
                detail="both are what each worker advertises to Ray: say it once",
            )
    for field_name in ("ray_labels", "labels"):
        for key in body.get(field_name) or {}:
            if key.startswith(RESERVED_LABEL_PREFIXES):
                diags.error(
                    f"label {key!r} is reserved",
                    positions.at((*base, field_name, key), prefer_key=True),
                    detail=RESERVED_LABELS_WHY,
                )
    for key, value in (body.get("labels") or {}).items():
        where = positions.at((*base, "labels", key), prefer_key=True)
        if key.startswith(RESERVED_LABEL_PREFIXES):
            continue
        if key in body["ray_labels"] and body["ray_labels"][key] != value:
            diags.error(
                f"labels.{key} is {value!r} but ray_labels.{key} is {body['ray_labels'][key]!r}",
                where,
                detail="both are labels each worker carries: say it once",
            )


def _check_cpu(
    node_type: NodeType,
    body: dict[str, Any],
    base: JsonPath,
    positions: Positions,
    diags: Diagnostics,
) -> None:
    if node_type.shape.has_cpu:
        return
    filters = node_type.offer.filters
    detail = (
        "Ray places a task only where it has CPU, so Ray's demand cannot be packed onto this "
        "node type: filter cpu_cores_effective (e.g. {gte: 4}) or declare resources: {CPU: 4}"
    )
    if "cpu_cores" in filters:
        detail += "; cpu_cores is the host's count, and a container may be given fewer"
    declared = (body.get("resources") or {}).get("CPU")
    where: JsonPath = (*base, "resources", "CPU") if declared is not None else (*base, "offer")
    diags.warning(
        f"node type {node_type.name!r} has no CPU lower bound, so ray-vast cannot tell how "
        "many tasks a worker of it takes",
        positions.at(where, prefer_key=True),
        detail=detail,
    )


def _check_gpu(
    node_type: NodeType,
    body: dict[str, Any],
    base: JsonPath,
    positions: Positions,
    diags: Diagnostics,
) -> None:
    filters = node_type.offer.filters
    named = [f for f in shapes.GPU_FILTERS if f in filters]
    if not named or "GPU" in node_type.shape.resources or "GPU" in (body.get("resources") or {}):
        return
    diags.warning(
        f"node type {node_type.name!r} filters on {named[0]} but num_gpus has no lower bound, "
        "so its shape has no GPU",
        positions.at((*base, "offer", "filters", named[0]), prefer_key=True),
        detail="tasks that ask for GPUs will not be planned onto it: add num_gpus: {gte: 1} "
        "or declare resources: {GPU: 1}",
    )


def _check_overclaim(
    node_type: NodeType,
    body: dict[str, Any],
    base: JsonPath,
    positions: Positions,
    diags: Diagnostics,
) -> None:
    """A declared CPU or GPU above what the filters guarantee plans on capacity that a rented
    worker may not have."""
    declared = body.get("resources") or {}
    for resource, field in (("CPU", "cpu_cores_effective"), ("GPU", "num_gpus")):
        bound = shapes.filter_bound(node_type.offer.filters, field)
        if resource not in declared or bound is None:
            continue
        derived = math.floor(bound + 1e-9)
        if declared[resource] > max(derived, 1 if resource == "CPU" else 0):
            diags.warning(
                f"resources.{resource} ({declared[resource]}) is more than the offer filters "
                f"guarantee ({field} at least {derived})",
                positions.at((*base, "resources", resource)),
                detail=f"ray-vast would plan {declared[resource]} {resource} on a worker that "
                f"may have {derived}; what a worker really has replaces it once it joins",
            )


def check_image_versions(
    cluster: ClusterSpec, doc: dict[str, Any], positions: Positions, diags: Diagnostics
) -> None:
    """Against the Ray and Python this ray-vast runs, which its head's Ray runs with."""
    image_warnings(cluster, positions, diags, head=rayruntime.local())


def image_warnings(
    cluster: ClusterSpec, positions: Positions, diags: Diagnostics, *, head: RayVersions
) -> None:
    """A node type whose image tag names another Ray version or Python than `head` runs (a
    `rayproject/ray:2.49.0-py310-cu121` style tag; any other tag says nothing, and nothing is
    said): Ray refuses such a worker, so its candidates would be refused at enrollment and the
    node type halted. A warning: the tag may lie, and the head may be upgraded first."""
    for name, node_type in cluster.node_types.items():
        tag = rayversions.from_image(node_type.image)
        if tag is None:
            continue
        named = rayversions.tag_disagrees(tag, head)
        if not named:
            continue
        python = ".".join((head.python or "").split(".")[:2])
        diags.warning(
            f"image {node_type.image} names {' and '.join(named)}; the head runs {head.says()}",
            positions.at(("spec", "node_types", name, "image")),
            detail="Ray refuses a worker node of another Ray or Python version: its candidates "
            f"would be refused when they enroll and node type {name!r} halted; use an image of "
            f"Ray {head.ray} on Python {python}",
        )


def _matching(doc: Any, pattern: JsonPath, path: JsonPath = ()) -> Iterable[tuple[JsonPath, Any]]:
    """Values of `doc` at a path pattern where `*` matches any key."""
    if not pattern:
        yield path, doc
        return
    if not isinstance(doc, dict):
        return
    head, rest = pattern[0], pattern[1:]
    keys = list(doc) if head == "*" else [head] if head in doc else []
    for key in keys:
        yield from _matching(doc[key], rest, (*path, key))


CHECKS: tuple[Check, ...] = (
    check_workers,
    check_cluster_max,
    check_floors,
    check_testing,
    check_timers,
    check_ports,
    check_budget,
    check_node_types,
    check_shapes,
    check_image_versions,
)
