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


class HeadServices:
    """The head service of every cluster the controller holds, kept in step with its specs: a
    cluster added by a reload gets its PKI, its served ports and its launcher (so its rentals
    carry the bootloader and a join token); a removed one's ports are closed; a changed one's
    app takes the new spec (thresholds, node types)."""

    def __init__(
        self,
        controller: Controller,
        journal: Journal,
        *,
        state_dir: Path,
        clock: Clock,
        vast_url: str | None,
        secrets: tuple[str, ...],
        agent_env: Mapping[str, str] | None,
    ) -> None:
        self.controller = controller
        self.journal = journal
        self.state_dir = state_dir
        self.clock = clock
        self.vast_url = vast_url
        self.secrets = secrets
        self.agent_env = agent_env
        self.services: dict[str, HeadService] = {}
        self.launchers: dict[str, Launcher] = {}
        self.launcher = ByCluster(self.launchers, ImageLauncher())
        self.reload(controller.specs)

    def reload(self, specs: Mapping[str, ClusterSpec]) -> None:
        for name in sorted(set(self.services) - set(specs)):
            self.services.pop(name).stop()
            self.launchers.pop(name, None)
        for name, spec in specs.items():
            current = self.services.get(name)
            if current is None:
                self._add(spec)
            elif current.app.spec is not spec:
                current.app.set_spec(spec)

    def _add(self, spec: ClusterSpec) -> None:
        service = HeadService(
            spec=spec,
            cluster_pki=cluster_pki(self.state_dir, spec, self.clock.now()),
            host=self.controller.journal,
            ledger=self.journal.ledger,
            applier=self.controller.applier,
            lineage=self.journal.lineage,
            clock=self.clock,
        )
        url = self.vast_url or str(getattr(self.controller.provider, "base_url", ""))
        self.launchers[spec.name] = service.launcher(
            vast_url=url, clock=self.clock, forbidden=self.secrets, agent_env=self.agent_env
        )
        service.start()
        self.services[spec.name] = service

    def stop(self) -> None:
        for name in sorted(self.services):
            self.services.pop(name).stop()

    def alert_repeats(self) -> dict[tuple[str, str], int]:
        """Every head's alerts not added again (for the metrics)."""
        out: dict[tuple[str, str], int] = {}
        for service in self.services.values():
            for key, n in service.alert_repeats().items():
                out[key] = out.get(key, 0) + n
        return out


def head_extension(
    *,
    state_dir: Path,
    clock: Clock,
    vast_url: str | None,
    secrets: tuple[str, ...],
    agent_env: Mapping[str, str] | None = None,
) -> Extension:
    """Builds the head services and their launchers once the controller exists; they follow
    every reload of the specs (`HeadServices.reload`)."""

    def build(controller: Controller, journal: Journal) -> tuple[Launcher, list[Service]]:
        heads = HeadServices(
            controller,
            journal,
            state_dir=state_dir,
            clock=clock,
            vast_url=vast_url,
            secrets=secrets,
            agent_env=agent_env,
        )
        return heads.launcher, [heads]

    return build
