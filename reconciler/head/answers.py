"""The enrollment answer, and the two things it is built from: the port plan and the endpoints.

Networking (DESIGN.md "Networking"): a vast container is reachable only at the ports asked for in
the create call. The launcher asks for a fixed block of container ports at or above 70000, which
vast maps one-to-one ("identity mappings"): the container learns each one's number from
`VAST_TCP_PORT_<p>`, listens on it itself, and it is reachable at the same number on its public
address. Ray is then told to use exactly those: one node-manager port, one object-manager port,
and a bounded list of worker ports. That bound is the node's worker-process limit, which is why
heartbeats carry the worker ports in use.

What the node advertises: a node type that declares `CPU` or `GPU` in `resources:` has its
workers' Ray started with exactly that (`ray.num_cpus`, `ray.num_gpus`: `--num-cpus`,
`--num-gpus`), so the shape ray-vast packs Ray's demand onto is the node Ray sees; what is not
declared the agent counts on the machine (cgroup quota, NVIDIA devices, or the simulator's
GPUs). `ray start` takes whole numbers, so a declared amount is rounded down. Custom resources
(`ray_resources` and the custom keys of `resources:`) go in `ray.resources` (`--resources`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.head.enrollment import Admission
from reconciler.head.messages import PROTOCOL, EnrollRequest, ResumeRequest
from reconciler.head.pki import Issued
from reconciler.model.accelerators import ACCELERATOR_LABEL, ACCELERATOR_RESOURCE_PREFIX
from reconciler.model.raystart import RAY_NODE_ENV
from reconciler.model.spec import ClusterSpec

IDENTITY_PORTS = 70_000
RAY_STOP_GRACE_SECONDS = 3.0


@dataclass(frozen=True)
class PortPlan:
    """Which container ports a worker publishes, and what Ray uses each for."""

    first: int = IDENTITY_PORTS
    worker_ports: int = 16

    def __post_init__(self) -> None:
        if self.worker_ports < 1 or self.worker_ports + 2 > 64:  # vast opens at most 64 ports
            raise ValueError("a worker needs 1 to 62 worker ports")

    @property
    def container_ports(self) -> tuple[int, ...]:
        return tuple(range(self.first, self.first + 2 + self.worker_ports))

    def resolve(self, mapped: Mapping[int, int]) -> tuple[int, int, tuple[int, ...]]:
        """(node manager, object manager, worker ports) as reachable, from what the container
        was told; a port vast did not map keeps its own number."""
        ports = [mapped.get(p, p) for p in self.container_ports]
        return ports[0], ports[1], tuple(ports[2:])


@dataclass(frozen=True)
class HeadEndpoints:
    """Where workers reach the head."""

    address: str
    ray_port: int
    enroll_port: int
    heartbeat_port: int

    @property
    def enroll_url(self) -> str:
        return f"https://{_host(self.address)}:{self.enroll_port}"

    @property
    def heartbeat_url(self) -> str:
        return f"https://{_host(self.address)}:{self.heartbeat_port}/heartbeat"

    @property
    def ray_address(self) -> str:
        return f"{_host(self.address)}:{self.ray_port}"


def thresholds(spec: ClusterSpec) -> dict[str, float]:
    """Every threshold the worker's watchdog uses, from the spec (so tests can shrink them)."""
    w = spec.watchdogs
    return {
        "heartbeat_interval_seconds": float(w.heartbeat_interval_seconds),
        "worker_gives_up_after_seconds": float(w.worker_gives_up_after_seconds),
        "report_wait_seconds": float(w.report_wait_seconds),
        "self_destroy_retry_seconds": float(w.self_destroy_retry_seconds),
        "ray_stop_grace_seconds": RAY_STOP_GRACE_SECONDS,
    }


def enroll_answer(
    admission: Admission,
    request: EnrollRequest,
    *,
    spec: ClusterSpec,
    endpoints: HeadEndpoints,
    ports: PortPlan,
    certificate: Issued,
    ca_pem: str,
    ray_auth_token: str,
) -> dict[str, Any]:
    """agent-enroll-response.v1.json for one admitted worker."""
    answer = _answer(
        admission,
        request,
        spec=spec,
        endpoints=endpoints,
        ports=ports,
        ray_auth_token=ray_auth_token,
    )
    answer["certificate"] = {
        "cert_pem": certificate.cert_pem.decode(),
        "key_pem": certificate.key_pem.decode(),
        "ca_pem": ca_pem,
        "serial": f"{certificate.serial:x}",
        "not_after": certificate.not_after,
    }
    return answer


def resume_answer(
    admission: Admission,
    request: ResumeRequest,
    *,
    spec: ClusterSpec,
    endpoints: HeadEndpoints,
    ports: PortPlan,
    ray_auth_token: str,
) -> dict[str, Any]:
    """agent-enroll-response.v1.json for a resumed worker (DESIGN.md 10): the enrollment answer
    as the node type is now and the machine says it is now (its ports are read again), with
    `resumed` and without a certificate: the worker goes on with the one it kept."""
    answer = _answer(
        admission,
        request,
        spec=spec,
        endpoints=endpoints,
        ports=ports,
        ray_auth_token=ray_auth_token,
    )
    answer["resumed"] = True
    return answer


def _answer(
    admission: Admission,
    request: EnrollRequest | ResumeRequest,
    *,
    spec: ClusterSpec,
    endpoints: HeadEndpoints,
    ports: PortPlan,
    ray_auth_token: str,
) -> dict[str, Any]:
    record = admission.record
    node_type = spec.node_types.get(record.node_type)
    node_manager, object_manager, worker_ports = ports.resolve(request.ports)
    labels = dict(node_type.ray_labels) if node_type else {}
    labels.update(
        rv_cluster=spec.name,
        rv_node_type=record.node_type,
        rv_record=record.id,
        rv_slot=admission.slot_id,
    )
    resources = dict(node_type.ray_resources) if node_type else {}
    resources[f"rv-slot-{admission.slot_id}"] = 1.0
    accelerator = node_type.shape.labels.get(ACCELERATOR_LABEL) if node_type else None
    if accelerator is not None:  # what Ray would find on the card (no NVML in a simulation)
        labels[ACCELERATOR_LABEL] = accelerator
        resources[f"{ACCELERATOR_RESOURCE_PREFIX}{accelerator}"] = 1.0
    counts = declared_counts(node_type.declared_resources) if node_type else {}
    return {
        "protocol": PROTOCOL,
        "cluster": spec.name,
        "node_type": record.node_type,
        "record_id": record.id,
        "request_id": admission.request_id,
        "slot_id": admission.slot_id,
        "instance_id": request.instance_id,
        "heartbeat": {"url": endpoints.heartbeat_url},
        "ray": {
            "head_address": endpoints.ray_address,
            "auth_mode": "token",
            "auth_token": ray_auth_token,
            "node_ip_address": request.public_ip or "",
            "node_manager_port": node_manager,
            "object_manager_port": object_manager,
            "worker_ports": list(worker_ports),
            **counts,
            "resources": resources,
            "labels": labels,
            "env": {
                # autoscaler v2 matches a cloud instance to its Ray node by this id
                "RAY_CLOUD_INSTANCE_ID": str(request.instance_id),
                "RAY_NODE_TYPE_NAME": record.node_type,
                **RAY_NODE_ENV,
            },
        },
        "thresholds": thresholds(spec),
    }


def declared_counts(declared: Mapping[str, float]) -> dict[str, int]:
    """`num_cpus` and `num_gpus` of the answer's `ray`, for what the node type declares."""
    counts: dict[str, int] = {}
    for resource, key in (("CPU", "num_cpus"), ("GPU", "num_gpus")):
        if resource in declared:
            counts[key] = max(0, math.floor(float(declared[resource]) + 1e-9))
    return counts


def _host(address: str) -> str:
    """An IPv6 literal goes in brackets in a URL and in host:port."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
