"""The agent protocol's messages, as the head reads them.

The JSON Schemas (`reconciler/schemas/agent-*.v1.json`, linked from `schemas/`) are the contract
between the head and the agent, which share no code: the head validates every incoming message
against them before it reads a field, and the tests validate what the agent sends and what the head
answers. What passes is turned into a frozen dataclass here, so the decisions never touch raw JSON.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, validators

from reconciler.head import fastcheck
from reconciler.model.rayversions import RayVersions

PROTOCOL = 1
ENROLL_REQUEST = "agent-enroll-request.v1.json"
ENROLL_RESPONSE = "agent-enroll-response.v1.json"
HEARTBEAT = "agent-heartbeat.v1.json"
REPORT = "agent-report.v1.json"
RESUME = "agent-resume.v1.json"
ERROR = "agent-error.v1.json"
MAX_BODY = 64 * 1024


class BadMessage(ValueError):
    """A message that is not JSON or does not match its schema."""


@functools.cache
def schema(name: str) -> dict[str, Any]:
    text = resources.files("reconciler").joinpath(f"schemas/{name}").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


INT_LIMIT = 2**63


def _clean(value: Any, strings: bool = True) -> Any:
    """A parsed document made safe to hash, ledger and convert (see `parse`). `strings`: whether
    a string may hold a lone surrogate at all (see `_may_hold_surrogates`). Dispatched on the
    exact type, in the order a heartbeat holds them (most of a message is keys and numbers)."""
    kind = type(value)
    if kind is str:
        if strings and _surrogates(value):  # each lone surrogate becomes U+FFFD
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return value
    if kind is dict:
        return {_clean(k, strings): _clean(v, strings) for k, v in value.items()}
    if kind is int:
        if not -INT_LIMIT < value < INT_LIMIT:
            raise ValueError("a number past 64 bits")
        return value
    if kind is list:
        return [_clean(v, strings) for v in value]
    if kind is bool or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("a number that is not finite")
        return float(value)  # a plain float, not the parser's `fastcheck.Real`
    return value


def _may_hold_surrogates(body: bytes) -> bool:
    """Whether a string parsed from `body` can hold a lone surrogate. Not when `body` is ASCII
    with no NUL (so `json.loads` reads it as UTF-8, not UTF-16 or UTF-32, and no raw surrogate
    can be in it: it decodes with "surrogatepass") and has no `\\u` escape: then no string
    needs the per-string check."""
    return not (body.isascii() and b"\x00" not in body and b"\\u" not in body)


def _surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _is_integer(checker: Any, instance: object) -> bool:
    """An integer is an int (not a bool, not an integral float like 1234.0)."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_STRICT = Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
_Validator = validators.extend(Draft202012Validator, type_checker=_STRICT)  # type: ignore[no-untyped-call]


@functools.cache
def validator(name: str) -> Draft202012Validator:
    return _Validator(schema(name))  # type: ignore[no-any-return]


@functools.cache
def _fast(name: str) -> Callable[[Any], Any]:
    return fastcheck.compiled(schema(name))


def parse(name: str, body: bytes) -> dict[str, Any]:
    """The JSON object in `body`, checked against schema `name`; `BadMessage` says what is wrong.

    Anything a stranger can send must end here as `BadMessage`, never as another exception (a
    500): JSON nested past the recursion limit, integers longer than Python converts, `NaN` and
    the infinities (not JSON at all, though Python's parser takes them), numbers past 64 bits,
    and integral floats where the schema says integer (`1234.0` is one to JSON Schema, not to the
    records). Lone surrogates in strings are replaced (U+FFFD), not refused: a worker's report
    may quote output that had them, and it is the only record of why the worker ended."""
    try:
        raw = json.loads(body, parse_constant=_no_constant, parse_float=fastcheck.Real)
        doc = _clean(raw, _may_hold_surrogates(body))
    except (UnicodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise BadMessage(f"not JSON: {str(exc)[:200]}") from exc
    if isinstance(doc, dict) and fastcheck.passes(_fast(name), raw):
        return doc
    try:
        errors = sorted(validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    except RecursionError as exc:
        raise BadMessage("nested too deeply") from exc
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top)"
        raise BadMessage(f"{where}: {first.message}")
    if not isinstance(doc, dict):  # the schemas all say object; this is for the type checker
        raise BadMessage("not a JSON object")
    return doc


@dataclass(frozen=True)
class EnrollRequest:
    token: str
    instance_id: int
    boot_id: str
    public_ip: str | None
    ports: Mapping[int, int]
    cpus: int
    gpus: int
    cpu_source: str = ""
    # The Ray and Python the image would run Ray with; None: an agent that does not say
    runtime: RayVersions | None = None
    runtime_source: str = ""

    def __repr__(self) -> str:  # the token is a secret
        return f"EnrollRequest(instance_id={self.instance_id}, boot_id={self.boot_id!r})"

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> EnrollRequest:
        machine = doc["machine"]
        return cls(
            token=doc["token"],
            instance_id=doc["instance_id"],
            boot_id=doc["boot_id"],
            public_ip=doc["public_ip"],
            ports={int(k): int(v) for k, v in doc["ports"].items()},
            cpus=machine["cpus"],
            gpus=machine["gpus"],
            cpu_source=machine.get("cpu_source", ""),
            **_runtime(doc.get("runtime")),
        )


@dataclass(frozen=True)
class ResumeRequest:
    """A worker the head stopped deliberately, asking to go on with its kept certificate."""

    instance_id: int
    record_id: str
    boot_id: str
    public_ip: str | None
    ports: Mapping[int, int]
    cpus: int
    gpus: int
    cpu_source: str = ""
    runtime: RayVersions | None = None
    runtime_source: str = ""

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> ResumeRequest:
        machine = doc["machine"]
        return cls(
            instance_id=doc["instance_id"],
            record_id=doc["record_id"],
            boot_id=doc["boot_id"],
            public_ip=doc["public_ip"],
            ports={int(k): int(v) for k, v in doc["ports"].items()},
            cpus=machine["cpus"],
            gpus=machine["gpus"],
            cpu_source=machine.get("cpu_source", ""),
            **_runtime(doc.get("runtime")),
        )


def _runtime(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """`EnrollRequest`'s `runtime` fields from the request's `runtime` object."""
    if doc is None:
        return {}
    versions = RayVersions(
        doc["ray_version"], doc["python_version"], doc.get("python_version_match_level")
    )
    where = ", ".join(str(doc[k]) for k in ("python", "source") if doc.get(k))
    return {"runtime": versions, "runtime_source": where}


@dataclass(frozen=True)
class RaySample:
    state: str
    pid: int | None
    exit_code: int | None
    uptime_seconds: float | None


@dataclass(frozen=True)
class Heartbeat:
    """One heartbeat: the process limit, Ray's state, a utilisation sample (kept for the idle
    scanner, which reads the latest one per worker)."""

    instance_id: int
    record_id: str
    boot_id: str
    seq: int
    sent_at: float
    ray: RaySample
    pids: int
    pids_limit: int | None
    worker_ports_in_use: tuple[int, ...]
    worker_ports_total: int
    sample_seconds: float | None
    cpu_fraction: float | None
    load1: float | None
    memory_used_fraction: float | None
    net_rx_bytes: int | None
    net_tx_bytes: int | None
    gpu_fraction: float | None
    received_at: float = 0.0
    # Newer fields, absent from an older agent's sample: the busiest GPU's memory-controller
    # activity (NVML's utilization.memory: the share of time device memory was read or written),
    # the fullest GPU's memory in use (occupancy, shown, not traffic), and where CPU and GPU
    # figures came from ("cgroup" or "host"; "nvml" or "nvidia-smi").
    gpu_memory_activity: float | None = None
    gpu_memory_fraction: float | None = None
    cpu_source: str | None = None
    gpu_source: str | None = None
    # The agent heard "stop pending" and waits for the stop (its Ray's exit is part of it).
    stop_acknowledged: bool = False

    @classmethod
    def of(cls, doc: Mapping[str, Any], *, received_at: float) -> Heartbeat:
        ray, use = doc["ray"], doc["utilisation"]
        return cls(
            instance_id=doc["instance_id"],
            record_id=doc["record_id"],
            boot_id=doc["boot_id"],
            seq=doc["seq"],
            sent_at=float(doc["sent_at"]),
            ray=RaySample(
                ray["state"], ray["pid"], ray.get("exit_code"), ray.get("uptime_seconds")
            ),
            pids=doc["processes"]["pids"],
            pids_limit=doc["processes"]["pids_limit"],
            worker_ports_in_use=tuple(doc["worker_ports"]["in_use"]),
            worker_ports_total=doc["worker_ports"]["total"],
            sample_seconds=use["sample_seconds"],
            cpu_fraction=use["cpu_fraction"],
            load1=use["load1"],
            memory_used_fraction=use["memory_used_fraction"],
            net_rx_bytes=use["net_rx_bytes"],
            net_tx_bytes=use["net_tx_bytes"],
            gpu_fraction=use["gpu_fraction"],
            received_at=received_at,
            gpu_memory_activity=use.get("gpu_memory_activity"),
            gpu_memory_fraction=use.get("gpu_memory_fraction"),
            cpu_source=use.get("cpu_source"),
            gpu_source=use.get("gpu_source"),
            stop_acknowledged=doc.get("stop") == "acknowledged",
        )


@dataclass(frozen=True)
class Report:
    """Why a container is about to destroy its own instance."""

    token: str
    instance_id: int
    boot_id: str
    record_id: str | None
    phase: str
    reason: str
    detail: str
    at: float

    def __repr__(self) -> str:
        return f"Report(instance_id={self.instance_id}, reason={self.reason!r})"

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> Report:
        return cls(
            token=doc["token"],
            instance_id=doc["instance_id"],
            boot_id=doc["boot_id"],
            record_id=doc.get("record_id"),
            phase=doc["phase"],
            reason=doc["reason"],
            detail=doc["detail"],
            at=float(doc["at"]),
        )
