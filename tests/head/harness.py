"""A head for tests: a served vastsim, the real vast client, the head service on real TLS sockets,
records in memory (every save kept), and the real ledger on disk.

`HeadWorld.rent` does what the executor does for one rent, with the hook the head needs from it:
the pending record is saved, the launcher builds the create request, `launcher.before_create`
puts the join token's hash in the records (saved before the call), then vast is called.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reconciler.applying.applier import Applier
from reconciler.applying.books import HostBooks
from reconciler.clock import SystemClock
from reconciler.head import tls
from reconciler.head.decisions import put
from reconciler.head.launcher import AgentLauncher
from reconciler.head.pki import ClusterPki, Issued, pki_dir
from reconciler.head.service import HeadService
from reconciler.head.shared import SharedRecords
from reconciler.model.labels import label_for
from reconciler.model.observed import CreateRequest, OfferSearch
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request, Slot
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from reconciler.state.ledger import LedgerEntry, LedgerWriter, read_ledger
from reconciler.vast import config as vast_config
from reconciler.vast.client import VastClient
from reconciler.vast.factory import client_from_settings
from tests.specs import load_spec
from vastsim import Market, NoContainers, RealClock, Runner, Server, Sim, Timing, serve

KEY = "acct-key-7c1e9f0d2b44a9"
ADMIN = "admin-key-51a0"
IMAGE = "vastsim/agent-test:latest"
LINEAGE = "5d2c1e0f-3b4a-4968-8a7b-0c1d2e3f4a5b"


def hc_record(ident: str, *, created_at: float, **changes: Any) -> InstanceRecord:
    """A record of the test cluster `hc` (a running candidate unless `changes` say otherwise):
    the one builder the head's in-process tests share."""
    base = InstanceRecord(
        id=ident,
        cluster="hc",
        node_type="cpu",
        managed_by=LINEAGE,
        label=f"rv.hc.{LINEAGE[:8]}.{ident}",
        role=Role.CANDIDATE,
        intent=Intent.RUNNING,
        phase=Phase.RUNNING,
        created_at=created_at,
        offer_id=1,
        machine_id=1,
        host_id=1,
        dph_total=0.2,
    )
    return replace(base, **changes)


CLUSTER = "hc"
ROOT = Path(__file__).resolve().parents[2]

WATCHDOGS = """\
heartbeat_interval_seconds: 1
worker_gives_up_after_seconds: 3
candidate_self_destroy_seconds: 4
report_wait_seconds: 2
self_destroy_retry_seconds: 1
bootloader_give_up_seconds: 3
"""


def market(machines: int = 12, *, image: str = IMAGE, price_scale: int = 100) -> Market:
    """`machines` one-GPU machines with `image` cached, machine i at 0.10 + i/`price_scale` $/h
    (each a little dearer than the one before, so the planner's order is the machines' order)."""
    return Market.from_dict(
        {
            "images": {image: 1.0},
            "defaults": {"cached_images": [image], "storage_cost": 0.1},
            "machines": [
                {
                    "machine_id": 100 + i,
                    "host_id": 500 + i,
                    "gpu_name": "RTX 3090",
                    "num_gpus": 1,
                    "dph_base": 0.10 + i / price_scale,
                }
                for i in range(machines)
            ],
        }
    )


def cluster_spec(*, name: str = CLUSTER, watchdogs: str = WATCHDOGS) -> ClusterSpec:
    body = textwrap.dedent(
        f"""\
        provider: {{type: vastsim}}
        head: {{address: 127.0.0.1, ray_port: 6390}}
        max_dollars_per_hour: 100
        testing: {{allow_short_thresholds: true}}
        node_types:
          cpu:
            min_workers: 0
            max_workers: 8
            image: {IMAGE}
            disk_gb: 10
            pull_limit_seconds: 60
            env: {{USER_SETTING: hello}}
            ray_resources: {{special: 2}}
            ray_labels: {{team: ml}}
          plain:
            min_workers: 0
            max_workers: 2
            image: {IMAGE}
            disk_gb: 10
            agent: false
        watchdogs:
        """
    )
    return load_spec(spec_yaml(name, body + textwrap.indent(watchdogs, "  ")))


class ShiftClock:
    """The real clock, moved forward by `advance` (TLS still sees real time)."""

    def __init__(self) -> None:
        self.shift = 0.0

    def now(self) -> float:
        return time.time() + self.shift

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def advance(self, seconds: float) -> None:
        self.shift += seconds


@dataclass
class Rented:
    record_id: str
    vast_id: int
    token: str
    create: CreateRequest


@dataclass
class Reply:
    status: int
    doc: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class HeadWorld:
    tmp: Path
    sim: Sim
    server: Server
    spec: ClusterSpec
    clock: ShiftClock
    shared: SharedRecords
    ledger_path: Path
    service: HeadService
    launcher: AgentLauncher
    pki: ClusterPki
    saved: list[Records]
    client: Any
    _next: int = 1

    # --- records ---------------------------------------------------------------------------

    def records(self) -> Records:
        return self.shared.records()

    def record(self, record_id: str) -> InstanceRecord:
        return self.records().instances[record_id]

    def change(self, change: Callable[[Records], Records]) -> None:
        self.shared.update(change)

    def place(self, slots: int = 1, node_type: str = "cpu") -> str:
        ident = f"q{self._bump()}"
        now = self.clock.now()
        request = Request(
            id=ident,
            cluster=self.spec.name,
            node_type=node_type,
            managed_by=LINEAGE,
            placed_at=now,
            provision_deadline=now + 3600,
            slots=tuple(Slot(f"{ident}s{i}") for i in range(1, slots + 1)),
        )
        self.change(lambda r: replace(r, requests={**r.requests, ident: request}))
        return ident

    def rent(self, request_id: str, node_type: str = "cpu") -> Rented:
        """One rent, as the executor does it (with the `before_create` hook)."""
        offer = self.client.search_offers(OfferSearch())[0]
        ident = f"i{self._bump()}"
        record = InstanceRecord(
            id=ident,
            cluster=self.spec.name,
            node_type=node_type,
            managed_by=LINEAGE,
            label=label_for(self.spec.name, LINEAGE, ident),
            role=Role.CANDIDATE,
            intent=Intent.RUNNING,
            phase=Phase.PENDING_CREATE,
            created_at=self.clock.now(),
            offer_id=offer.id,
            machine_id=offer.machine_id,
            host_id=offer.host_id,
            dph_total=offer.dph_total,
            request_id=request_id,
            exempt=not self.spec.node_types[node_type].agent,
        )
        self.change(lambda r: put(r, record))
        create = self.launcher.create_request(
            self.spec, self.spec.node_types[node_type], record, bid=None
        )
        self.change(lambda r: self.launcher.before_create(r, record))
        created = self.client.create_instance(offer.id, create)
        rented = replace(record, vast_id=created.instance_id, phase=Phase.RENTING)
        self.change(lambda r: put(r, rented))
        self.launcher.created(rented, created)
        return Rented(ident, created.instance_id, create.env.get("RV_JOIN_TOKEN", ""), create)

    def _bump(self) -> int:
        value = self._next
        self._next += 1
        return value

    # --- the ledger ------------------------------------------------------------------------

    def ledger(self, cls: str | None = None) -> list[LedgerEntry]:
        entries = list(read_ledger(self.ledger_path))
        return [e for e in entries if cls is None or e.class_ == cls]

    # --- talking to the head ---------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        port: str = "enroll",
        client: Issued | None = None,
        ca_pem: str | None = None,
        raw: bool = False,
    ) -> Reply:
        context = tls.client_context(ca_pem or self.pki.ca_pem, client=client)
        number = self.service.endpoints.enroll_port
        if port == "heartbeat":
            number = self.service.endpoints.heartbeat_port
        conn = http.client.HTTPSConnection("127.0.0.1", number, context=context, timeout=10)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            doc = data if raw else json.loads(data)
            return Reply(answer.status, doc, dict(answer.getheaders()))
        finally:
            conn.close()

    def enroll(self, rented: Rented, *, boot_id: str = "b0b0b0b0", **overrides: Any) -> Reply:
        return self.call("POST", "/enroll", enroll_body(rented, boot_id=boot_id, **overrides))

    def heartbeat(self, answer: Mapping[str, Any], *, client: Issued | None, **kw: Any) -> Reply:
        body = heartbeat_body(answer, **kw)
        return self.call("POST", "/heartbeat", body, port="heartbeat", client=client)


def enroll_body(rented: Rented, *, boot_id: str = "b0b0b0b0", **overrides: Any) -> dict[str, Any]:
    ports = {str(p): p - 30_000 for p in rented.create.ports}  # as VAST_TCP_PORT_<p> says
    body: dict[str, Any] = {
        "protocol": 1,
        "token": rented.token,
        "instance_id": rented.vast_id,
        "boot_id": boot_id,
        "public_ip": "127.0.0.1",
        "ports": ports,
        "machine": {"cpus": 2, "cpu_source": "test", "gpus": 0},
    }
    body.update(overrides)
    return body


def heartbeat_body(
    answer: Mapping[str, Any],
    *,
    seq: int = 1,
    state: str = "running",
    boot_id: str = "b0b0b0b0",
    instance_id: int | None = None,
    cpu: float | None = 0.0,
) -> dict[str, Any]:
    return {
        "protocol": 1,
        "instance_id": instance_id if instance_id is not None else answer["instance_id"],
        "record_id": answer["record_id"],
        "boot_id": boot_id,
        "seq": seq,
        "sent_at": time.time(),
        "ray": {"state": state, "pid": 4242, "exit_code": None, "uptime_seconds": 1.5},
        "processes": {"pids": 12, "pids_limit": 4096, "ray_processes": 5},
        "worker_ports": {"in_use": [], "total": len(answer["ray"]["worker_ports"])},
        "utilisation": {
            "sample_seconds": 1.0,
            "cpu_fraction": cpu,
            "load1": 0.1,
            "memory_used_fraction": 0.2,
            "net_rx_bytes": 10,
            "net_tx_bytes": 10,
            "gpu_fraction": None,
        },
    }


def client_pair(answer: Mapping[str, Any]) -> Issued:
    cert = answer["certificate"]
    return Issued(cert["cert_pem"].encode(), cert["key_pem"].encode())


@contextmanager
def head_world(
    tmp: Path,
    *,
    runner: Runner | None = None,
    spec: ClusterSpec | None = None,
    agent_env: Mapping[str, str] | None = None,
    python: str = "python3",
    records: Records | None = None,
    lineage: str = LINEAGE,
) -> Iterator[HeadWorld]:
    spec = spec or cluster_spec()
    sim = Sim(
        market=market(),
        clock=RealClock(),
        api_key=KEY,
        admin_key=ADMIN,
        runner=runner or NoContainers(),
        timing=Timing.fast(),
    )
    clock = ShiftClock()
    saved: list[Records] = []
    with serve(sim, step_interval=0.02) as server:
        client = _client(server.url)
        writer = LedgerWriter.open(tmp / "state" / "ledger.jsonl", clock=clock, secrets=(KEY,))
        shared = SharedRecords(records or Records(), save=saved.append)
        pki = ClusterPki.load_or_create(
            pki_dir(tmp / "state", spec.name), spec.name, spec.head.address, now=clock.now()
        )
        service, applier = _service(
            spec, pki=pki, shared=shared, writer=writer, client=client, lineage=lineage, clock=clock
        )
        launcher = service.launcher(
            vast_url=server.url, clock=clock, python=python, forbidden=(KEY,), agent_env=agent_env
        )
        world = HeadWorld(
            tmp=tmp,
            sim=sim,
            server=server,
            spec=spec,
            clock=clock,
            shared=shared,
            ledger_path=tmp / "state" / "ledger.jsonl",
            service=service,
            launcher=launcher,
            pki=pki,
            saved=saved,
            client=client,
        )
        service.start()
        try:
            yield world
        finally:
            service.stop()
            applier.stop()
            client.close()
            writer.close()


def _client(url: str) -> VastClient:
    """The real vast client against the served vastsim, unpaced (vastsim sets no rate limit)."""
    return client_from_settings(
        env={"VAST_API_KEY": KEY, "VAST_URL": url},
        spec_url=None,
        clock=SystemClock(),
        settings=vast_config.ClientSettings(pacing=False),
    )


def _service(
    spec: ClusterSpec,
    *,
    pki: ClusterPki,
    shared: SharedRecords,
    writer: LedgerWriter,
    client: VastClient,
    lineage: str,
    clock: ShiftClock,
) -> tuple[HeadService, Applier]:
    """The head service on free ports, with its own applier, as the watch controller's would
    be: its specs follow the app's."""
    applier = Applier(
        provider=client,
        books=HostBooks(shared, writer, lineage),
        now=clock.now,
        specs=lambda: {service.app.spec.name: service.app.spec},
    )
    service = HeadService(
        spec=spec,
        cluster_pki=pki,
        host=shared,
        ledger=writer,
        applier=applier,
        lineage=lineage,
        clock=clock,
        bind_host="127.0.0.1",
        enroll_port=0,
        heartbeat_port=0,
    )
    return service, applier


def venv_path() -> str:
    """PATH with this interpreter's directory first (the containers' `python3`)."""
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
