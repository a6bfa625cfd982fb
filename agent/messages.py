"""The agent's messages to the head, as JSON documents (pure; standard library only).

One place builds what the agent sends (agent-enroll-request, agent-resume, agent-heartbeat and
agent-report v1), so the real agent and the virtual-time harness send the very same bodies: the
head's schemas and decisions see in the harness what they see from a container. What varies
between the two worlds (the clock, the machine's readings) comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent import stopping
from agent.config import Settings
from agent.state import DETAIL_LIMIT, Report

PROTOCOL = 1


def enroll_body(
    settings: Settings,
    *,
    boot_id: str,
    cpus: int,
    cpu_source: str,
    gpus: int,
    runtime: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """POST /enroll: the join token, who presents it, and the machine it runs on; `runtime` is
    the Ray and Python the image would run Ray with (`agent.rayversion.probe`)."""
    body: dict[str, Any] = {
        "protocol": PROTOCOL,
        "token": settings.join_token,
        "instance_id": settings.instance_id,
        "boot_id": boot_id,
        "public_ip": settings.public_ip,
        "ports": {str(k): v for k, v in sorted(settings.ports.items())},
        "machine": {"cpus": cpus, "cpu_source": cpu_source[:200], "gpus": gpus},
    }
    if runtime is not None:
        body["runtime"] = dict(runtime)
    if settings.agent_sha256:
        body["agent_sha256"] = settings.agent_sha256
    return body


def resume_body(
    settings: Settings,
    *,
    record_id: str,
    boot_id: str,
    cpus: int,
    cpu_source: str,
    gpus: int,
    runtime: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """POST /resume (port B, with the saved certificate): a worker the head stopped deliberately
    asks to go on after the head started its instance again; what the enrollment said of the
    machine is said again (its address and ports may have changed)."""
    body: dict[str, Any] = {
        "protocol": PROTOCOL,
        "instance_id": settings.instance_id,
        "record_id": record_id,
        "boot_id": boot_id,
        "public_ip": settings.public_ip,
        "ports": {str(k): v for k, v in sorted(settings.ports.items())},
        "machine": {"cpus": cpus, "cpu_source": cpu_source[:200], "gpus": gpus},
    }
    if runtime is not None:
        body["runtime"] = dict(runtime)
    return body


def resume_url(heartbeat_url: str) -> str:
    """Where a resume goes: the heartbeat port (the same mutual TLS), path `/resume`."""
    scheme, _, rest = heartbeat_url.partition("://")
    netloc = rest.split("/", 1)[0]
    return f"{scheme}://{netloc}/resume"


def heartbeat_body(
    settings: Settings,
    *,
    record_id: str,
    boot_id: str,
    seq: int,
    sent_at: float,
    ray: Mapping[str, Any],
    processes: Mapping[str, Any],
    worker_ports: Mapping[str, Any],
    utilisation: Mapping[str, Any],
    stop_acknowledged: bool = False,
) -> dict[str, Any]:
    """POST /heartbeat (port B): Ray's state, the process limit and a utilisation sample; and,
    while the worker waits for a stop the head said is pending, "stop": "acknowledged"."""
    body: dict[str, Any] = {
        "protocol": PROTOCOL,
        "instance_id": settings.instance_id,
        "record_id": record_id,
        "boot_id": boot_id,
        "seq": seq,
        "sent_at": sent_at,
        "ray": dict(ray),
        "processes": dict(processes),
        "worker_ports": dict(worker_ports),
        "utilisation": dict(utilisation),
    }
    if stop_acknowledged:
        body["stop"] = stopping.ACKNOWLEDGED
    return body


def report_body(settings: Settings, *, boot_id: str, report: Report, at: float) -> dict[str, Any]:
    """POST /report: the reason, before the self-destroy; `at` is the container's wall clock."""
    return {
        "protocol": PROTOCOL,
        "token": settings.join_token,
        "instance_id": settings.instance_id,
        "boot_id": boot_id,
        "record_id": report.record_id,
        "phase": report.phase,
        "reason": report.reason,
        "detail": report.detail[:DETAIL_LIMIT],
        "at": at,
    }
