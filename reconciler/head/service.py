"""The head's agent services on the network: two TLS ports, each served by background threads.

- the enrollment port (TLS, server-authenticated): `POST /enroll`, `POST /report`, `GET /agent`;
- the heartbeat port, "port B" (mutual TLS, only the cluster CA's certificates): `POST /heartbeat`,
  and `POST /resume` (a worker back after a deliberate stop, with its kept certificate).

This module is the composition alone. The pieces it puts together:

- `head/server.py`: a TLS HTTP server bounded for the internet (`Limits`: caps, deadlines);
- `head/handlers.py`: the HTTP of one request, bounded, and each port's routes to the app;
- `head/refusals.py`: what the ports refused, counted and noted off their threads;
- `head/app.py`: the `HeadApp`, which decides.

`HeadService` builds the app and both servers from what the watch controller has (spec, PKI,
records host, ledger, and the controller's one applier) and runs them until `stop`. The applier
is always the caller's: the head's destroys go through the same one as every other change at vast
(a head run alone, as in the tests, is given one over its provider).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from reconciler.applying.applier import Applier
from reconciler.clock import Clock
from reconciler.head import tls
from reconciler.head.agentsource import AgentBundle
from reconciler.head.answers import HeadEndpoints, PortPlan
from reconciler.head.app import HeadApp
from reconciler.head.handlers import EnrollHandler, HeartbeatHandler
from reconciler.head.launcher import AgentLauncher
from reconciler.head.pki import ClusterPki
from reconciler.head.refusals import Refusals
from reconciler.head.server import LIMITS, STOP_JOIN_SECONDS, Limits, Port, TlsServer, bind
from reconciler.head.shared import LedgerSink, RecordsStore
from reconciler.model.spec import ClusterSpec


class HeadService:
    """Enrollment and heartbeats for one cluster, served until `stop`.

    The ports are bound when the service is made (port 0 picks a free one), so `endpoints` and a
    `launcher()` are ready before `start`. `bind_host` defaults to every interface: the workers
    are on the internet. `limits` bound what a peer may hold of either port (`Limits`);
    `refusals()` counts what they refused.
    """

    def __init__(
        self,
        *,
        spec: ClusterSpec,
        cluster_pki: ClusterPki,
        host: RecordsStore,
        ledger: LedgerSink,
        applier: Applier,
        lineage: str,
        clock: Clock,
        agent: AgentBundle | None = None,
        ports: PortPlan | None = None,
        bind_host: str = "0.0.0.0",  # noqa: S104 - workers reach the head over the internet
        enroll_port: int | None = None,
        heartbeat_port: int | None = None,
        limits: Limits = LIMITS,
    ) -> None:
        self.applier = applier
        self.app = HeadApp(
            spec=spec,
            cluster_pki=cluster_pki,
            host=host,
            ledger=ledger,
            applier=applier,
            lineage=lineage,
            clock=clock,
            endpoints=HeadEndpoints(spec.head.address, spec.head.ray_port, 0, 0),
            agent=agent if agent is not None else AgentBundle.load(),
            ports=ports,
        )
        self._refusals = Refusals(self.app.refused_handshake)
        self._servers: list[TlsServer[HeadApp]] = bind(
            bind_host,
            _ports(spec, cluster_pki, enroll_port, heartbeat_port),
            app=self.app,
            refuse=self._refusals.refuse,
            limits=limits,
        )
        self.app.endpoints = HeadEndpoints(
            spec.head.address, spec.head.ray_port, self._servers[0].port, self._servers[1].port
        )

    @property
    def endpoints(self) -> HeadEndpoints:
        return self.app.endpoints

    @property
    def limits(self) -> Limits:
        return self._servers[0].limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        """New limits for both ports, from the next connection on."""
        for server in self._servers:
            server.limits = limits

    def refusals(self) -> dict[tuple[str, str], int]:
        """Connections and requests the ports refused before the app, by (port, reason): the
        caps (`source_cap`, `total_cap`), a handshake (`tls:<OpenSSL's reason>`, `tls:timeout`),
        the request's deadline (`deadline`) and head (`request_line`, `header_lines`,
        `header_bytes`, `http_<status>`), and what no route takes (`not_found`, `method`,
        `length_required`, `body_too_large`). Port is "enrollment" or "heartbeat"."""
        return self._refusals.counts()

    def open_connections(self) -> dict[str, int]:
        """Connections admitted and not yet ended, by port."""
        return {server.name: server.open_connections() for server in self._servers}

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        """The head's alerts not added again within a minute, by (cluster, class)."""
        return self.app.alert_repeats()

    def launcher(
        self,
        *,
        vast_url: str,
        clock: Clock,
        python: str = "python3",
        forbidden: tuple[str, ...] = (),
        agent_env: Mapping[str, str] | None = None,
    ) -> AgentLauncher:
        """The launcher whose candidates enroll here."""
        return AgentLauncher.for_app(
            self.app,
            vast_url=vast_url,
            clock=clock,
            python=python,
            forbidden=forbidden,
            agent_env=agent_env,
        )

    def start(self) -> None:
        self._refusals.start()
        for server in self._servers:
            server.serve_in_thread()

    def stop_heartbeats(self) -> None:
        """Close port B alone (the head's heartbeat service is down; enrollment stays up)."""
        self._servers[1].close()

    def stop(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            server.join(timeout=STOP_JOIN_SECONDS)
        self._refusals.stop()

    def __enter__(self) -> HeadService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _ports(
    spec: ClusterSpec, cluster_pki: ClusterPki, enroll: int | None, heartbeat: int | None
) -> tuple[Port, Port]:
    """The enrollment port and port B, on the numbers given (None: the spec's)."""
    return (
        Port(
            "enrollment",
            spec.head.enroll_port if enroll is None else enroll,
            EnrollHandler,
            tls.enrollment_server_context(cluster_pki),
        ),
        Port(
            "heartbeat",
            spec.head.heartbeat_port if heartbeat is None else heartbeat,
            HeartbeatHandler,
            tls.heartbeat_server_context(cluster_pki),
        ),
    )
