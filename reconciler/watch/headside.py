"""Watch with the head's services: enrollment and heartbeats served beside the loop.

For each cluster whose workers run the agent, the PKI is loaded (or made), the head service binds
its two TLS ports and shares the controller's records, and its launcher becomes the executor's: a
rent then carries the bootloader and a fresh join token. Clusters are told apart by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.applying.journal import Journal
from reconciler.applying.launch import ImageLauncher, Launcher
from reconciler.clock import Clock
from reconciler.head.pki import ClusterPki, pki_dir
from reconciler.head.service import HeadService
from reconciler.model.observed import CreatedInstance, CreateRequest
from reconciler.model.records import InstanceRecord, Records
from reconciler.model.spec import ClusterSpec, NodeType
from reconciler.watch.controller import Controller
from reconciler.watch.runner import Extension, Service


@dataclass
class ByCluster:
    """One launcher per cluster behind the executor's single `Launcher`."""

    launchers: Mapping[str, Launcher]
    fallback: Launcher

    def _for(self, cluster: str) -> Launcher:
        return self.launchers.get(cluster, self.fallback)

    def create_request(
        self, spec: ClusterSpec, node_type: NodeType, record: InstanceRecord, *, bid: float | None
    ) -> CreateRequest:
        return self._for(spec.name).create_request(spec, node_type, record, bid=bid)

    def before_create(self, records: Records, record: InstanceRecord) -> Records:
        return self._for(record.cluster).before_create(records, record)

    def created(self, record: InstanceRecord, created: CreatedInstance) -> None:
        self._for(record.cluster).created(record, created)


def cluster_pki(state_dir: Path, spec: ClusterSpec, now: float) -> ClusterPki:
    return ClusterPki.load_or_create(
        pki_dir(state_dir, spec.name), spec.name, spec.head.address, now=now
    )


def head_extension(
    *,
    state_dir: Path,
    clock: Clock,
    vast_url: str | None,
    secrets: tuple[str, ...],
    agent_env: Mapping[str, str] | None = None,
) -> Extension:
    """Builds the head services and their launchers once the controller exists."""

    def build(controller: Controller, journal: Journal) -> tuple[Launcher, list[Service]]:
        launchers: dict[str, Launcher] = {}
        services: list[Service] = []
        for spec in controller.specs.values():
            service = HeadService(
                spec=spec,
                cluster_pki=cluster_pki(state_dir, spec, clock.now()),
                host=controller,
                ledger=journal,
                provider=controller.provider,
                lineage=journal.lineage,
                clock=clock,
            )
            url = vast_url or str(getattr(controller.provider, "base_url", ""))
            launchers[spec.name] = service.launcher(
                vast_url=url, clock=clock, forbidden=secrets, agent_env=agent_env
            )
            service.start()
            services.append(service)
        return ByCluster(launchers, ImageLauncher()), services

    return build
