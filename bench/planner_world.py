"""The inputs of the planner benchmark (`bench/planner.py`): a fleet built as a watch tick sees it.

- 200 cluster specs loaded through `reconciler.spec.loader.load_texts`, so they are real,
  validated, defaulted specs (two or three node types each, one of them bid-priced);
- records: mostly enrolled workers in filled requests, plus candidates of open requests (some
  pulling, some running), stopped machines whose intent is running, destroys that did not finish,
  and pending creates whose label is already listed;
- one complete listing that shows all of them, plus instances of other states (foreign), labelled
  instances with no record (orphans) and instances that are not ray-vast's at all;
- offers for every node type, and Ray demand on some of them, so the scaling step rents.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from reconciler.model.demand import scripted
from reconciler.model.labels import label_for
from reconciler.model.observation import NodeKey, Observation
from reconciler.model.observed import Instance, Offer
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml

try:
    from reconciler.model.requestrecord import Request, RequestStatus, Slot
except ModuleNotFoundError:  # a baseline from before model/requestrecord.py (0ac2f81)
    from reconciler.model.records import Request, RequestStatus, Slot

LINEAGE = "5eed0000-1111-2222-3333-444455556666"
OTHER_LINEAGE = "0ther000-aaaa-bbbb-cccc-ddddeeeeffff"
NOW = 1_800_000_000.0
SEED = 9
OFFERS_PER_NODE_TYPE = 64
WORKERS_PER_REQUEST = 8

# Node types of the generated clusters: (name, offer type, candidate factor, $/h of a worker).
NODE_TYPES: tuple[tuple[str, str, int, float], ...] = (
    ("gpu", "on-demand", 2, 0.40),
    ("cpu", "on-demand", 2, 0.12),
    ("a100", "bid", 1, 1.10),
)


# --- inputs ------------------------------------------------------------------------------------


@dataclass
class World:
    """Everything one `plan` call takes."""

    specs: list[ClusterSpec]
    records: Records
    observation: Observation
    instances: int  # live instance records (the "N" of the table)


@dataclass
class _Builder:
    """Builds records and the listing rows that show them, with ids unique across clusters."""

    rng: random.Random
    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    requests: dict[str, Request] = field(default_factory=dict)
    rows: list[Instance] = field(default_factory=list)
    next_record: int = 1
    next_vast: int = 30_000_001

    def record_id(self) -> str:
        ident = f"i{self.next_record}"
        self.next_record += 1
        return ident

    def vast_id(self) -> int:
        self.next_vast += 1
        return self.next_vast


def cluster_yaml(name: str, node_types: Sequence[tuple[str, int, int]]) -> str:
    """One cluster spec as a user writes it: `(node type, min_workers, max_workers)` each."""
    lines = [
        "  max_dollars_per_hour: 5000",
        "  node_types:",
    ]
    kinds = {kind: (offer, factor) for kind, offer, factor, _ in NODE_TYPES}
    for kind, low, high in node_types:
        offer, factor = kinds[kind]
        lines += [
            f"    {kind}:",
            f"      min_workers: {low}",
            f"      max_workers: {high}",
            f"      candidate_factor: {factor}",
            "      offer:",
            f"        type: {offer}",
            *(["        max_bid_dollars_per_hour: 1.5"] if offer == "bid" else []),
            "        filters: {num_gpus: {eq: 1}}",
            "      image: rayproject/ray:2.60.0-py311-cu124",
            "      disk_gb: 40",
        ]
    return spec_yaml(name, "\n".join(lines) + "\n")


def _split(total: int, parts: int) -> list[int]:
    """`total` as `parts` near-equal integers."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def build_world(instances: int, clusters: int, *, seed: int = SEED) -> World:
    """Specs, records, a listing and offers for `instances` live instances across `clusters`."""
    rng = random.Random(seed)
    builder = _Builder(rng)
    texts: list[tuple[str, str]] = []
    demand: dict[NodeKey, int] = {}
    for index, per_cluster in enumerate(_split(instances, clusters)):
        name = f"c{index:03d}"
        kinds = [k for k, *_ in NODE_TYPES][: 3 if index % 3 == 0 else 2]
        declared = []
        for kind, count in zip(kinds, _split(per_cluster, len(kinds)), strict=True):
            workers, open_slots = _fill_node_type(builder, name, kind, count)
            extra = 1 if index % 10 == 5 else 0  # some node types are short: a new request
            low = min(workers + open_slots + extra, 1000)
            declared.append((kind, low, min(max(low, 1) * 2, 1000)))
            if index % 10 == 0:
                demand[(name, kind)] = low + 1  # Ray asks for one more worker
        texts.append((f"{name}.yaml", cluster_yaml(name, declared)))
    _add_strangers(builder, clusters, max(1, instances // 100))
    loaded = load_texts(texts)
    if not loaded.ok:
        raise SystemExit("\n".join(d.summary for d in loaded.diagnostics))
    offers = _offers(loaded.clusters)
    records = Records(
        instances=builder.instances, requests=builder.requests, next_id=builder.next_record
    )
    clusters_by_name = {c.name: c for c in loaded.clusters}
    observation = Observation(
        listing=tuple(builder.rows), offers=offers, ray=scripted(clusters_by_name, demand)
    )
    live = sum(1 for r in builder.instances.values() if r.live)
    return World(list(loaded.clusters), records, observation, live)


def _fill_node_type(builder: _Builder, cluster: str, kind: str, count: int) -> tuple[int, int]:
    """`count` live records of one node type; returns (workers, open slots of its request)."""
    mix = [_role_of(builder.rng) for _ in range(count)]
    factor = next(f for k, _, f, _ in NODE_TYPES if k == kind)
    candidates = [m for m in mix if m in ("pulling", "running")]
    spare = len(candidates) % factor  # every open slot has exactly `factor` candidates ...
    candidates = candidates[spare:]
    workers = [m for m in mix if m in ("worker", "stopped")] + [
        "worker"
    ] * spare  # ... the rest work
    for start in range(0, len(workers), WORKERS_PER_REQUEST):
        chunk = workers[start : start + WORKERS_PER_REQUEST]
        _filled_request(builder, cluster, kind, [m == "stopped" for m in chunk])
    open_slots = len(candidates) // factor
    if candidates:
        _open_request(builder, cluster, kind, candidates, open_slots)
    for other in (m for m in mix if m in ("destroying", "pending")):
        _loose(builder, cluster, kind, other)
    return len(workers), open_slots


def _role_of(rng: random.Random) -> str:
    """The mix of a fleet in flight: most machines are workers, some are on their way in or out."""
    roll = rng.random()
    for share, role in (
        (0.80, "worker"),
        (0.02, "stopped"),
        (0.08, "pulling"),
        (0.06, "running"),
        (0.02, "destroying"),
    ):
        if roll < share:
            return role
        roll -= share
    return "pending"


def _base_record(
    builder: _Builder, cluster: str, kind: str, *, role: Role, phase: Phase, request: str | None
) -> InstanceRecord:
    ident = builder.record_id()
    dph = next(p for k, _, _, p in NODE_TYPES if k == kind)
    machine = 500_000 + builder.next_record
    return InstanceRecord(
        id=ident,
        cluster=cluster,
        node_type=kind,
        managed_by=LINEAGE,
        label=label_for(cluster, LINEAGE, ident),
        role=role,
        intent=Intent.RUNNING,
        phase=phase,
        created_at=NOW - 3_600,
        offer_id=machine + 1_000_000,
        machine_id=machine,
        host_id=machine // 3,
        dph_total=dph,
        storage_dph=0.01,
        request_id=request,
        vast_id=builder.vast_id(),
        first_observed_at=NOW - 3_500,
        provider_seen_at=NOW - 60,
    )


def _row(record: InstanceRecord, status: str | None) -> Instance:
    return Instance(
        id=record.vast_id or 0,
        label=record.label,
        actual_status=status,
        intended_status="running",
        public_ipaddr=record.public_ip or f"198.51.{record.host_id % 250}.{record.host_id % 200}",
        machine_id=record.machine_id,
        host_id=record.host_id,
        dph_total=record.dph_total,
        start_date=record.created_at,
    )


def _filled_request(builder: _Builder, cluster: str, kind: str, stopped: list[bool]) -> None:
    ident = f"q{builder.record_id()}"
    slots = []
    for index, is_stopped in enumerate(stopped):
        record = _base_record(
            builder, cluster, kind, role=Role.WORKER, phase=Phase.SERVING, request=ident
        )
        ip = f"203.0.{record.host_id % 250}.{index + 1}"
        record = replace(
            record,
            slot_id=f"{ident}s{index + 1}",
            enrolled_at=NOW - 3_000,
            self_report_at=NOW - 10,
            sample_at=NOW - 10,
            sample_busy=True,
            first_running_at=NOW - 3_100,
            public_ip=ip,
            phase=Phase.STOPPED if is_stopped else Phase.SERVING,
        )
        builder.instances[record.id] = record
        builder.rows.append(_row(record, "stopped" if is_stopped else "running"))
        slots.append(Slot(f"{ident}s{index + 1}", worker=record.id))
    builder.requests[ident] = Request(
        id=ident,
        cluster=cluster,
        node_type=kind,
        managed_by=LINEAGE,
        placed_at=NOW - 3_700,
        provision_deadline=NOW - 1_900,
        slots=tuple(slots),
        status=RequestStatus.FILLED,
        dispatched_at=NOW - 3_650,
    )


def _open_request(
    builder: _Builder, cluster: str, kind: str, candidates: list[str], open_slots: int
) -> None:
    ident = f"q{builder.record_id()}"
    for state in candidates:
        record = _base_record(
            builder, cluster, kind, role=Role.CANDIDATE, phase=Phase.PULLING, request=ident
        )
        record = replace(record, created_at=NOW - 200, first_observed_at=NOW - 190)
        if state == "running":
            record = replace(record, phase=Phase.RUNNING, first_running_at=NOW - 20)
        builder.instances[record.id] = record
        builder.rows.append(_row(record, "running" if state == "running" else "loading"))
    builder.requests[ident] = Request(
        id=ident,
        cluster=cluster,
        node_type=kind,
        managed_by=LINEAGE,
        placed_at=NOW - 200,
        provision_deadline=NOW + 1_600,
        slots=tuple(Slot(f"{ident}s{i + 1}") for i in range(open_slots)),
        dispatched_at=NOW - 200,
    )


def _loose(builder: _Builder, cluster: str, kind: str, state: str) -> None:
    """A destroy that did not finish (still listed), or a pending create whose label is listed."""
    record = _base_record(
        builder, cluster, kind, role=Role.CANDIDATE, phase=Phase.DESTROYING, request=None
    )
    if state == "destroying":
        record = replace(record, intent=Intent.DESTROYED)
        builder.rows.append(_row(record, "running"))
    else:
        listed = _row(record, None)
        record = replace(
            record,
            phase=Phase.PENDING_CREATE,
            vast_id=None,
            created_at=NOW - 30,
            first_observed_at=None,
            provider_seen_at=None,
        )
        builder.rows.append(listed)
    builder.instances[record.id] = record


def _add_strangers(builder: _Builder, clusters: int, count: int) -> None:
    """Rows a real account also shows: another state's, our orphans, and nobody's."""
    for index in range(count):
        cluster = f"c{index % clusters:03d}"
        for label in (
            label_for(cluster, OTHER_LINEAGE, f"x{index}"),
            label_for(cluster, LINEAGE, f"gone{index}"),
            None if index % 2 else f"jupyter-{index}",
        ):
            builder.rows.append(
                Instance(
                    id=builder.vast_id(),
                    label=label,
                    actual_status="running",
                    intended_status="running",
                    public_ipaddr="192.0.2.7",
                    dph_total=0.3,
                    start_date=NOW - 7_200,
                )
            )


def _offers(specs: Sequence[ClusterSpec]) -> dict[NodeKey, tuple[Offer, ...]]:
    """A search result per node type (the same market seen from every cluster)."""
    by_kind = {
        kind: tuple(
            Offer(
                id=7_000_000 + k * 1_000 + i,
                machine_id=900_000 + k * 1_000 + i,
                host_id=800_000 + k * 1_000 + i // 2,
                dph_total=round(price * (0.8 + 0.01 * i), 4),
                num_gpus=1,
                gpu_name=kind,
                disk_space=200.0,
                storage_cost=0.1,
                min_bid=round(price * 0.5, 4),
                reliability=0.99,
                verification="verified",
                direct_port_count=100,
                rentable=True,
                rented=False,
            )
            for i in range(OFFERS_PER_NODE_TYPE)
        )
        for k, (kind, _, _, price) in enumerate(NODE_TYPES)
    }
    return {(s.name, n): by_kind[n] for s in specs for n in s.node_types}
