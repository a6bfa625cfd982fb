"""The agent's settings, read once from the container's environment.

Two sources, both set by someone else: vast sets `CONTAINER_ID`, `CONTAINER_API_KEY` (the
instance-scoped key that may destroy this instance and nothing else), `PUBLIC_IPADDR` and one
`VAST_TCP_PORT_<p>` per published port; the head's launcher sets the `RV_*` variables:

    RV_CLUSTER, RV_NODE_TYPE, RV_RECORD_ID     who this candidate was rented as
    RV_HEAD_ADDRESS, RV_ENROLL_PORT            where the head's enrollment port is (TLS)
    RV_CA_PEM                                  the cluster CA: the only one the agent trusts
    RV_JOIN_TOKEN                              single-use proof of the record it was rented for
    RV_AGENT_SHA256                            the agent the bootloader accepts
    RV_VAST_URL                                the vast API, for the self-destroy
    RV_PORTS                                   the container ports asked for (informational)
    RV_HEARTBEAT_INTERVAL_SECONDS, RV_WORKER_GIVES_UP_AFTER_SECONDS,
    RV_CANDIDATE_SELF_DESTROY_SECONDS, RV_REPORT_WAIT_SECONDS,
    RV_SELF_DESTROY_RETRY_SECONDS, RV_BOOTLOADER_GIVE_UP_SECONDS   the watchdog's thresholds
    RV_RAY_COMMAND                             optional: what to run instead of `ray` (tests)

The enrollment answer repeats every threshold a worker uses, and the answer wins: the head can
change them without a new container.

One more, set by the simulator only: `VASTSIM_SOURCE_IP`, the container's own address. On vast
the host's NAT gives the container's connections their public address; on one machine vastsim
gives each instance its own loopback address instead and asks the container to bind to it. When
it is set, every connection the agent opens (the head, vast's API) is bound to it and Ray
advertises it as the node's address; when not (on vast), the kernel picks, as usual.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_VAST_URL = "https://console.vast.ai"
SOURCE_IP_ENV = "VASTSIM_SOURCE_IP"
PORT_PREFIX = "VAST_TCP_PORT_"
REQUIRED = (
    "CONTAINER_ID",
    "CONTAINER_API_KEY",
    "RV_HEAD_ADDRESS",
    "RV_ENROLL_PORT",
    "RV_CA_PEM",
    "RV_JOIN_TOKEN",
)


class ConfigError(ValueError):
    """The environment lacks something the agent cannot work without."""


@dataclass(frozen=True)
class Settings:
    instance_id: int
    instance_key: str = field(repr=False)
    join_token: str = field(repr=False)
    head_address: str
    enroll_port: int
    ca_pem: str = field(repr=False)
    vast_url: str
    cluster: str = ""
    node_type: str = ""
    record_id: str = ""
    public_ip: str | None = None
    source_ip: str | None = None
    agent_sha256: str = ""
    ports: Mapping[int, int] = field(default_factory=dict)
    heartbeat_interval: float = 30.0
    worker_gives_up_after: float = 300.0
    candidate_self_destroy: float = 600.0
    report_wait: float = 10.0
    self_destroy_retry: float = 5.0
    bootloader_give_up: float = 600.0
    ray_command: tuple[str, ...] = ("ray",)

    @property
    def enroll_url(self) -> str:
        host = self.head_address
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"https://{host}:{self.enroll_port}"

    @property
    def destroy_url(self) -> str:
        return f"{self.vast_url}/api/v0/instances/{self.instance_id}/"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        missing = [name for name in REQUIRED if not env.get(name)]
        if missing:
            raise ConfigError(f"missing from the environment: {', '.join(missing)}")
        return cls(
            instance_id=_int(env, "CONTAINER_ID"),
            instance_key=env["CONTAINER_API_KEY"],
            join_token=env["RV_JOIN_TOKEN"],
            head_address=env["RV_HEAD_ADDRESS"],
            enroll_port=_int(env, "RV_ENROLL_PORT"),
            ca_pem=env["RV_CA_PEM"],
            vast_url=vast_url(env),
            cluster=env.get("RV_CLUSTER", ""),
            node_type=env.get("RV_NODE_TYPE", ""),
            record_id=env.get("RV_RECORD_ID", ""),
            public_ip=env.get("PUBLIC_IPADDR") or None,
            source_ip=source_ip(env),
            agent_sha256=env.get("RV_AGENT_SHA256", ""),
            ports=mapped_ports(env),
            heartbeat_interval=_seconds(env, "RV_HEARTBEAT_INTERVAL_SECONDS", 30.0),
            worker_gives_up_after=_seconds(env, "RV_WORKER_GIVES_UP_AFTER_SECONDS", 300.0),
            candidate_self_destroy=_seconds(env, "RV_CANDIDATE_SELF_DESTROY_SECONDS", 600.0),
            report_wait=_seconds(env, "RV_REPORT_WAIT_SECONDS", 10.0),
            self_destroy_retry=_seconds(env, "RV_SELF_DESTROY_RETRY_SECONDS", 5.0),
            bootloader_give_up=_seconds(env, "RV_BOOTLOADER_GIVE_UP_SECONDS", 600.0),
            ray_command=tuple(shlex.split(env.get("RV_RAY_COMMAND", "") or "ray")),
        )


def vast_url(env: Mapping[str, str]) -> str:
    """Where the self-destroy goes: the head's choice, else vast's own variable, else vast."""
    return (env.get("RV_VAST_URL") or env.get("VAST_URL") or DEFAULT_VAST_URL).rstrip("/")


def source_ip(env: Mapping[str, str]) -> str | None:
    """The address to bind outgoing connections to, when told one (`VASTSIM_SOURCE_IP`)."""
    text = env.get(SOURCE_IP_ENV, "").strip()
    if not text:
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError as exc:
        raise ConfigError(f"{SOURCE_IP_ENV} is not an IP address: {text!r}") from exc


def mapped_ports(env: Mapping[str, str]) -> dict[int, int]:
    """Published container ports and the port each is reachable at (`VAST_TCP_PORT_<p>`)."""
    found: dict[int, int] = {}
    for name, value in env.items():
        suffix = name[len(PORT_PREFIX) :]
        if name.startswith(PORT_PREFIX) and suffix.isdigit() and value.strip().isdigit():
            found[int(suffix)] = int(value)
    return found


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError as exc:
        raise ConfigError(f"{name} is not a whole number: {env[name]!r}") from exc


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError as exc:
        raise ConfigError(f"{name} is not a number of seconds: {text!r}") from exc
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {text!r}")
    return value
