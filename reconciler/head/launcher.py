"""The launcher whose candidates run the ray-vast agent: what every rent is told to run.

For each create the executor asks for, it mints a join token and builds the create request: the
node type's image, the bootloader as PID 1 (`python3 -I -S -c <bootloader>`, vast's runtype
`args`), the container ports Ray will use, and an environment of `RV_*` settings (`ENV_*` below,
and `agent_env`, e.g. `RV_RAY_COMMAND`, which a node type's own env may not set). The token
travels only in that environment; the records keep its hash, and they must hold it before the
create call is made, so the executor asks `before_create(records, record)` for the records with the
token in them, saves those, and only then calls vast.

The account API key never goes to a worker: the launcher is never given it, and when it is told the
secrets to keep out (`forbidden`) it refuses any create request that would carry one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler.clock import Clock
from reconciler.errors import RayVastError
from reconciler.head import tokens
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan
from reconciler.model.observed import CreatedInstance, CreateRequest
from reconciler.model.records import InstanceRecord, JoinToken, Records
from reconciler.model.spec import ClusterSpec, NodeType

if TYPE_CHECKING:
    from reconciler.head.app import HeadApp

# The container's environment (the agent reads these; `docs` in the agent's config module).
ENV_PROTOCOL = "RV_PROTOCOL"
ENV_CLUSTER = "RV_CLUSTER"
ENV_NODE_TYPE = "RV_NODE_TYPE"
ENV_RECORD_ID = "RV_RECORD_ID"
ENV_HEAD_ADDRESS = "RV_HEAD_ADDRESS"
ENV_ENROLL_PORT = "RV_ENROLL_PORT"
ENV_CA_PEM = "RV_CA_PEM"
ENV_JOIN_TOKEN = "RV_JOIN_TOKEN"  # noqa: S105 - the name of the variable, not a token
ENV_AGENT_SHA256 = "RV_AGENT_SHA256"
ENV_VAST_URL = "RV_VAST_URL"
ENV_PORTS = "RV_PORTS"
THRESHOLD_ENV = {
    "RV_HEARTBEAT_INTERVAL_SECONDS": "heartbeat_interval_seconds",
    "RV_WORKER_GIVES_UP_AFTER_SECONDS": "worker_gives_up_after_seconds",
    "RV_CANDIDATE_SELF_DESTROY_SECONDS": "candidate_self_destroy_seconds",
    "RV_REPORT_WAIT_SECONDS": "report_wait_seconds",
    "RV_SELF_DESTROY_RETRY_SECONDS": "self_destroy_retry_seconds",
    "RV_BOOTLOADER_GIVE_UP_SECONDS": "bootloader_give_up_seconds",
}


class LeakRefused(RayVastError, ValueError):
    """A create request would have carried a secret that must stay on the head."""


class AgentLauncher:
    """A `reconciler.applying.launch.Launcher` that boots the agent with a fresh join token."""

    def __init__(
        self,
        *,
        endpoints: HeadEndpoints,
        ca_pem: str,
        agent: AgentBundle,
        vast_url: str,
        clock: Clock,
        ports: PortPlan | None = None,
        python: str = "python3",
        forbidden: tuple[str, ...] = (),
        agent_env: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.ca_pem = ca_pem
        self.agent = agent
        self.vast_url = vast_url.rstrip("/")
        self.clock = clock
        self.ports = ports or PortPlan()
        self.python = python
        self._forbidden = tuple(s for s in forbidden if s)
        # Extra agent settings for every container, e.g. RV_RAY_COMMAND (the `ray` to run).
        self.agent_env = dict(agent_env or {})
        self._pending: dict[str, JoinToken] = {}

    @classmethod
    def for_app(
        cls,
        app: HeadApp,
        *,
        vast_url: str,
        clock: Clock,
        python: str = "python3",
        forbidden: tuple[str, ...] = (),
        agent_env: Mapping[str, str] | None = None,
    ) -> AgentLauncher:
        """The launcher whose candidates enroll at `app`: its endpoints, its CA, its agent bundle
        and its port plan go into every create request. A head served on sockets (`HeadService`)
        and one called in-process (the virtual-time harness) build it the same way."""
        return cls(
            endpoints=app.endpoints,
            ca_pem=app.pki.ca_pem,
            agent=app.agent,
            vast_url=vast_url,
            clock=clock,
            ports=app.ports,
            python=python,
            forbidden=forbidden,
            agent_env=agent_env,
        )

    def create_request(
        self, spec: ClusterSpec, node_type: NodeType, record: InstanceRecord, *, bid: float | None
    ) -> CreateRequest:
        if not node_type.agent:
            # an exempt class: the image as it is, nothing of ours inside
            request = CreateRequest(
                image=node_type.image,
                disk_gb=node_type.disk_gb,
                label=record.label,
                env=dict(node_type.env),
                bid_price=bid,
            )
            self._check(request)
            return request
        token = tokens.mint()
        self._pending[record.id] = tokens.join_token(
            token,
            cluster=spec.name,
            record_id=record.id,
            now=self.clock.now(),
            window=tokens.enrollment_window(spec, node_type),
        )
        request = CreateRequest(
            image=node_type.image,
            disk_gb=node_type.disk_gb,
            label=record.label,
            env={
                **node_type.env,
                **self.agent_env,
                **self.environment(spec, node_type, record, token),
            },
            ports=self.ports.container_ports,
            # isolated (-I) and without site-packages (-S): the agent needs the stdlib alone
            args=(self.python, "-I", "-S", "-c", self.agent.bootloader),
            bid_price=bid,
        )
        self._check(request)
        return request

    def before_create(self, records: Records, record: InstanceRecord) -> Records:
        """The records with the join token of `record`'s coming create in them (hashed): the
        executor saves these before it calls vast, so a candidate can never enroll with a token
        the head has not recorded. Unchanged for a node type without an agent."""
        token = self._pending.get(record.id)
        return records if token is None else tokens.with_token(records, token)

    def created(self, record: InstanceRecord, created: CreatedInstance) -> None:
        """The token is bound to the record, which now knows its vast id; nothing more to keep."""
        self._pending.pop(record.id, None)

    def environment(
        self, spec: ClusterSpec, node_type: NodeType, record: InstanceRecord, token: str
    ) -> dict[str, str]:
        """The `RV_*` settings of one candidate's container."""
        w = spec.watchdogs
        env = {
            ENV_PROTOCOL: "1",
            ENV_CLUSTER: spec.name,
            ENV_NODE_TYPE: node_type.name,
            ENV_RECORD_ID: record.id,
            ENV_HEAD_ADDRESS: self.endpoints.address,
            ENV_ENROLL_PORT: str(self.endpoints.enroll_port),
            ENV_CA_PEM: self.ca_pem,
            ENV_JOIN_TOKEN: token,
            ENV_AGENT_SHA256: self.agent.sha256,
            ENV_VAST_URL: self.vast_url,
            ENV_PORTS: ",".join(str(p) for p in self.ports.container_ports),
        }
        for name, attribute in THRESHOLD_ENV.items():
            env[name] = str(getattr(w, attribute))
        return env

    def _check(self, request: CreateRequest) -> None:
        carried = [
            request.image,
            request.label,
            *request.env.keys(),
            *request.env.values(),
            *request.args,
            request.onstart or "",
        ]
        for secret in self._forbidden:
            if any(secret in value for value in carried):
                raise LeakRefused(
                    f"refusing to create {request.label}: its request would carry a secret "
                    "that must stay on the head (is the vast API key in the node type's env?)"
                )

    def __repr__(self) -> str:
        return f"AgentLauncher(head={self.endpoints.enroll_url}, python={shlex.quote(self.python)})"
