"""Small builders for planner tests: specs from YAML (through the real loader), offers, rows."""

from __future__ import annotations

import textwrap
import zlib
from dataclasses import replace
from typing import Any

from reconciler.model.labels import label_for
from reconciler.model.observed import Instance, Offer
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request, Slot
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec

LINEAGE = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
OTHER_LINEAGE = "99999999-aaaa-bbbb-cccc-dddddddddddd"
NOW = 1_800_000_000.0


def spec(
    *,
    name: str = "c1",
    min_workers: int = 1,
    max_workers: int = 4,
    factor: int = 2,
    cap: float = 10.0,
    extra: str = "",
    image: str = "img",
) -> ClusterSpec:
    body = textwrap.dedent(
        f"""\
        max_dollars_per_hour: {cap}
        node_types:
          gpu:
            min_workers: {min_workers}
            max_workers: {max_workers}
            candidate_factor: {factor}
            image: {image}
            disk_gb: 10
        """
    )
    return load_spec(spec_yaml(name, body + textwrap.dedent(extra)))


def offer(ident: int, dph: float, *, host: int | None = None, **kw: Any) -> Offer:
    base = Offer(
        id=ident,
        machine_id=ident + 1000,
        host_id=host if host is not None else ident + 2000,
        dph_total=dph,
        num_gpus=1,
        gpu_name="RTX 4090",
        disk_space=100.0,
        storage_cost=0.1,
        reliability=0.99,
        verification="verified",
        direct_port_count=100,
        rentable=True,
        rented=False,
    )
    return replace(base, **kw)


def record(
    ident: str,
    *,
    cluster: str = "c1",
    vast_id: int | None = None,
    role: Role = Role.CANDIDATE,
    phase: Phase = Phase.PULLING,
    intent: Intent = Intent.RUNNING,
    request: str | None = "q1",
    lineage: str = LINEAGE,
    **kw: Any,
) -> InstanceRecord:
    base = InstanceRecord(
        id=ident,
        cluster=cluster,
        node_type="gpu",
        managed_by=lineage,
        label=label_for(cluster, lineage, ident),
        role=role,
        intent=intent,
        phase=phase,
        created_at=NOW - 100,
        offer_id=1,
        machine_id=zlib.crc32(ident.encode()) % 10_000,
        host_id=zlib.crc32(ident.encode()) % 10_000 + 50_000,
        dph_total=0.5,
        storage_dph=0.01,
        request_id=request,
        vast_id=vast_id,
        first_observed_at=NOW - 90,
        provider_seen_at=NOW - 30,
    )
    return replace(base, **kw)


def row(rec: InstanceRecord | None = None, *, ident: int | None = None, **kw: Any) -> Instance:
    """A listing row; by default the one that shows `rec` healthy and running."""
    base = Instance(
        id=ident if ident is not None else (rec.vast_id if rec and rec.vast_id else 1),
        label=rec.label if rec else None,
        actual_status="running",
        intended_status="running",
        public_ipaddr=rec.public_ip if rec and rec.public_ip else "203.0.113.5",
        dph_total=rec.dph_total if rec else 0.5,
        start_date=NOW - 100,
        host_id=rec.host_id if rec else 1,
        machine_id=rec.machine_id if rec else 1,
    )
    return replace(base, **kw)


def request(
    ident: str = "q1", *, slots: int = 1, workers: tuple[str, ...] = (), **kw: Any
) -> Request:
    filled = [Slot(f"{ident}s{i + 1}", worker=w) for i, w in enumerate(workers)]
    empty = [Slot(f"{ident}s{i + 1}") for i in range(len(workers), slots)]
    base = Request(
        id=ident,
        cluster="c1",
        node_type="gpu",
        managed_by=LINEAGE,
        placed_at=NOW - 100,
        provision_deadline=NOW + 1000,
        slots=tuple(filled + empty),
    )
    return replace(base, **kw)


def records(*items: InstanceRecord | Request, **kw: Any) -> Records:
    instances = {i.id: i for i in items if isinstance(i, InstanceRecord)}
    requests = {r.id: r for r in items if isinstance(r, Request)}
    return Records(instances=instances, requests=requests, next_id=100, **kw)
