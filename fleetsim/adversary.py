"""The seeded adversary's worlds (DESIGN.md 11, "Safety is searched for, not only listed").

From one integer seed, `draw` makes a whole world with one `random.Random(seed)` and nothing else
random: 1-3 clusters whose specs are drawn from the schema's range (candidate_factor 1-3,
min/max workers, budgets, breaker slots and pause, idle timers, one or two node types), Ray's
demand over time per node type, the moments a person pins or unpins a worker, edits of a node
type's image or env, the removal of a spec file, stretches when the Ray head cannot be read, the
cheap end of the market broken (the cheapest acceptable hosts fail: OCI create failures, pulls
that never end, images that idle, exit or cannot reach the head), vastsim's own faults at random
moments (429 and 5xx storms, lost create responses, listings missing an instance, empty or failed,
containers exiting, hosts going offline or changing their address, reboots, `unknown`), and the
odds of a fault per container (`ContainerFault`: an image without Python, one that idles, one
without Ray; the head unreachable or only its heartbeats blocked for a span that may heal; the
network cut; Ray exiting; PID 1 killed) with each node's work over time.

Per-container draws are made when the container first boots, from a `random.Random` seeded by the
world's `salt` and the vast id: vast ids follow the order of rentals, which the seed fixes, so a
seed replays a run exactly. `fleetsim.adversary_play` plays a world into a fleet and
`fleetsim.invariants` judges it; `python -m bench.adversary --seed S --hours H` replays one.
"""

from __future__ import annotations

import math
import random
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from fleetsim.agents import ContainerFault, Image, Span
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load_texts
from reconciler.spec.text import spec_yaml

H = 3600.0
M = 60.0
GOOD_IMAGE = "rayproject/ray:2.60.0-py311-cpu"
# Images the world plays as broken (the harness reads `BROKEN_IMAGES` at each boot).
NO_RAY_IMAGE = "example.org/ray-vast/no-ray:1"
IDLE_IMAGE = "example.org/ray-vast/ignores-args:1"
BROKEN_IMAGES: Mapping[str, Image] = {NO_RAY_IMAGE: Image.NO_RAY, IDLE_IMAGE: Image.IDLES}

# What breaks a host at the cheap end of the market: vastsim traits, or every container there.
HOST_BREAKS = ("oci_failure", "never_boots", "idles", "no_python", "head_unreachable")
# vastsim's own faults the world plays (`fleetsim.adversary_play.vast_fault`).
VAST_FAULTS = (
    "rate_limit",
    "server_error",
    "lose_create_response",
    "hide_instance",
    "empty_listing",
    "fail_listing",
    "exit_instance",
    "offline",
    "change_ip",
    "reboot",
    "unknown",
)
# Container faults, by kind (`container_fault`).
CONTAINER_FAULTS = (
    "head_unreachable",
    "heartbeats_blocked",
    "network_cut",
    "ray_exits",
    "pid1_killed",
    "no_ray",
    "idles",
    "no_python",
)


@dataclass(frozen=True)
class NodeDraw:
    name: str
    min_workers: int
    max_workers: int
    factor: int
    image: str
    max_dph: float
    demand: tuple[tuple[float, int], ...]  # (from seconds after the start, workers wanted)

    def wanted(self, offset: float) -> int:
        value = 0
        for since, workers in self.demand:
            if since > offset:
                break
            value = workers
        return value


@dataclass(frozen=True)
class ClusterDraw:
    name: str
    cap: float
    breaker_slots: int
    pause_seconds: int
    idle_stop: int
    idle_destroy: int
    nodes: tuple[NodeDraw, ...]


@dataclass(frozen=True)
class Event:
    """Something the world does at `at` seconds after the start. `kind`: `edit` (a node type's
    image or env; `value` the new image, or the env value), `remove` (the cluster's spec file is
    removed), `pin` / `unpin` (`pick` chooses among live workers; `value` the pin's seconds or
    empty), or one of `VAST_FAULTS` (`pick` chooses the instance, `value` a count)."""

    at: float
    kind: str
    cluster: str = ""
    node: str = ""
    value: str = ""
    pick: int = 0


@dataclass(frozen=True)
class World:
    seed: int
    hours: float
    clusters: tuple[ClusterDraw, ...]
    events: tuple[Event, ...]
    broken_hosts: tuple[str, ...]  # the cheapest acceptable hosts' breaks, cheapest first
    unreadable: tuple[Span, ...]  # offsets when Ray's head cannot be read
    fault_rate: float  # the odds that a container gets a fault of `CONTAINER_FAULTS`
    salt: int
    market_seed: int
    extra: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [
            f"{c.name}(cap {c.cap:g}, breaker {c.breaker_slots}/{c.pause_seconds}s, "
            + ", ".join(
                f"{n.name}:{n.min_workers}-{n.max_workers}x{n.factor}"
                + ("" if n.image == GOOD_IMAGE else f" [{BROKEN_IMAGES[n.image].value}]")
                for n in c.nodes
            )
            + ")"
            for c in self.clusters
        ]
        kinds = sorted({e.kind for e in self.events})
        return (
            f"seed {self.seed}: {'; '.join(parts)}; broken hosts {list(self.broken_hosts)}; "
            f"fault rate {self.fault_rate:.2f}; events {len(self.events)} ({', '.join(kinds)}); "
            f"Ray head unreadable {len(self.unreadable)}x"
        )


def draw(seed: int, hours: float) -> World:
    """The world of one seed (the same seed, the same world)."""
    rng = random.Random(seed)  # noqa: S311 - a simulation, not cryptography
    horizon = hours * H
    clusters = tuple(_cluster(rng, k, horizon) for k in range(rng.randint(1, 3)))
    events: list[Event] = []
    for c in clusters:
        events += _spec_events(rng, c, horizon, alone=len(clusters) == 1)
    events += _pins(rng, horizon)
    events += _vast_faults(rng, horizon)
    broken = tuple(rng.choice(HOST_BREAKS) for _ in range(rng.choice((0, 1, 2, 3, 3, 4))))
    unreadable = tuple(
        Span(start, start + rng.uniform(1 * M, 20 * M))
        for start in sorted(rng.uniform(0, horizon) for _ in range(rng.choice((0, 0, 1, 2))))
    )
    return World(
        seed=seed,
        hours=hours,
        clusters=clusters,
        events=tuple(sorted(events, key=lambda e: (e.at, e.kind, e.cluster, e.node))),
        broken_hosts=broken,
        unreadable=unreadable,
        fault_rate=rng.uniform(0.05, 0.35),
        salt=rng.getrandbits(48),
        market_seed=rng.getrandbits(32),
    )


def _cluster(rng: random.Random, k: int, horizon: float) -> ClusterDraw:
    nodes = tuple(_node(rng, name, horizon) for name in ("gpu", "big")[: rng.choice((1, 1, 2))])
    idle_stop = rng.choice((120, 300, 600))
    return ClusterDraw(
        name=f"c{k + 1}",
        cap=round(rng.uniform(1.0, 8.0), 2),
        breaker_slots=rng.randint(1, 4),
        pause_seconds=rng.choice((60, 300, 600)),
        idle_stop=idle_stop,
        idle_destroy=idle_stop + rng.choice((300, 900, 1800)),
        nodes=nodes,
    )


def _node(rng: random.Random, name: str, horizon: float) -> NodeDraw:
    low = rng.choice((0, 0, 1, 1, 2))
    high = low + rng.randint(1, 3)
    steps: list[tuple[float, int]] = []
    at = 0.0
    while at < horizon:
        steps.append((at, rng.randint(0, high + 1)))
        at += rng.uniform(0.2, 1.5) * H
    image = GOOD_IMAGE if rng.random() < 0.75 else rng.choice(sorted(BROKEN_IMAGES))
    return NodeDraw(
        name=name,
        min_workers=low,
        max_workers=high,
        factor=rng.randint(1, 3),
        image=image,
        max_dph=rng.choice((0.2, 0.4, 1.2)),
        demand=tuple(steps),
    )


def _spec_events(rng: random.Random, c: ClusterDraw, horizon: float, *, alone: bool) -> list[Event]:
    """Edits of each node type (a broken image is often fixed), and sometimes the file removed."""
    events: list[Event] = []
    for n in c.nodes:
        if n.image != GOOD_IMAGE and rng.random() < 0.7:
            events.append(
                Event(rng.uniform(0.3, 0.8) * horizon, "edit", c.name, n.name, GOOD_IMAGE)
            )
        for _ in range(rng.choice((0, 0, 1, 2))):
            new = rng.choice((GOOD_IMAGE, NO_RAY_IMAGE, IDLE_IMAGE, "env"))
            value = f"env:{rng.randint(1, 9)}" if new == "env" else new
            events.append(Event(rng.uniform(0, horizon), "edit", c.name, n.name, value))
    if rng.random() < (0.1 if alone else 0.25):
        events.append(Event(rng.uniform(0.4, 0.9) * horizon, "remove", c.name))
    return events


def _pins(rng: random.Random, horizon: float) -> list[Event]:
    events: list[Event] = []
    for _ in range(rng.choice((0, 1, 2, 3))):
        at = rng.uniform(0, horizon)
        seconds = rng.choice(("", "1800", "7200"))
        pick = rng.randrange(1000)
        events.append(Event(at, "pin", value=seconds, pick=pick))
        if not seconds and rng.random() < 0.6:
            events.append(Event(at + rng.uniform(10 * M, 2 * H), "unpin", pick=pick))
    return events


def _vast_faults(rng: random.Random, horizon: float) -> list[Event]:
    return [
        Event(
            rng.uniform(0, horizon),
            rng.choice(VAST_FAULTS),
            value=str(rng.randint(1, 6)),
            pick=rng.randrange(1000),
        )
        for _ in range(rng.randint(2, 10))
    ]


# --- the specs ---------------------------------------------------------------------------------


def spec_text(c: ClusterDraw, images: Mapping[str, str], envs: Mapping[str, str]) -> str:
    """One cluster's spec file with each node type's current image and env."""
    text = textwrap.indent(
        textwrap.dedent(
            f"""\
          max_dollars_per_hour: {c.cap}
          breaker: {{slots: {c.breaker_slots}, pause_seconds: {c.pause_seconds}}}
          watchdogs:
            idle_stop_after_seconds: {c.idle_stop}
            idle_destroy_after_seconds: {c.idle_destroy}
          node_types:
        """
        ),
        "  ",
    )
    for n in c.nodes:
        text += (
            f"    {n.name}:\n"
            f"      min_workers: {n.min_workers}\n"
            f"      max_workers: {n.max_workers}\n"
            f"      candidate_factor: {n.factor}\n"
            f"      image: {images.get(n.name, n.image)}\n"
            "      disk_gb: 10\n"
            f"      offer: {{filters: {{num_gpus: {{eq: 1}}, dph_total: {{lte: {n.max_dph}}}}}}}\n"
        )
        if n.name in envs:
            text += f"      env: {{ADVERSARY_EDIT: '{envs[n.name]}'}}\n"
    return spec_yaml(c.name, text)


def specs_of(
    world: World,
    images: Mapping[str, Mapping[str, str]],
    envs: Mapping[str, Mapping[str, str]],
    removed: set[str],
) -> list[ClusterSpec]:
    """The specs as the world has edited them (`images`, `envs` by cluster and node type)."""
    return [
        load_spec(c, images.get(c.name, {}), envs.get(c.name, {}))
        for c in world.clusters
        if c.name not in removed
    ]


def load_spec(c: ClusterDraw, images: Mapping[str, str], envs: Mapping[str, str]) -> ClusterSpec:
    loaded = load_texts([(f"{c.name}.yaml", spec_text(c, images, envs))])
    if not loaded.ok or not loaded.clusters:
        raise ValueError(f"the adversary drew a spec the loader refuses: {loaded.diagnostics}")
    return loaded.clusters[0]


# --- one container's fate ------------------------------------------------------------------------


def container_fault(world: World, vast_id: int, now: float) -> tuple[ContainerFault, WorkSchedule]:
    """What goes wrong in one container (drawn at its first boot, `now`), and its work."""
    rng = random.Random(world.salt * 1_000_003 + vast_id)  # noqa: S311
    work = _work_schedule(rng, now)
    return _fault(rng, world, now, ContainerFault(working=work.busy)), work


def _fault(rng: random.Random, world: World, now: float, fault: ContainerFault) -> ContainerFault:
    if rng.random() >= world.fault_rate:
        return fault
    kind = rng.choice(CONTAINER_FAULTS)
    at = now + rng.uniform(0, 2 * H) if rng.random() < 0.7 else now + rng.uniform(0, 10 * M)
    span = Span(at, at + rng.uniform(1 * M, 30 * M) if rng.random() < 0.6 else math.inf)
    if kind == "head_unreachable":
        return replace(fault, head_unreachable=span)
    if kind == "heartbeats_blocked":
        return replace(fault, heartbeats_blocked=span)
    if kind == "network_cut":
        return replace(fault, head_unreachable=span, vast_unreachable=span)
    if kind == "ray_exits":
        return replace(fault, ray_exits_at=at)
    if kind == "pid1_killed":
        return replace(fault, pid1_killed_at=at)
    image = {"no_ray": Image.NO_RAY, "idles": Image.IDLES, "no_python": Image.NO_PYTHON}[kind]
    return replace(fault, image=image)


@dataclass(frozen=True)
class WorkSchedule:
    """A node's work: busy and quiet stretches alternating from its first boot."""

    changes: tuple[float, ...]  # the moments it turns busy, quiet, busy, ...
    busy_first: bool

    def busy(self, now: float) -> bool:
        flips = sum(1 for at in self.changes if at <= now)
        return self.busy_first == (flips % 2 == 0)

    def quiet_since(self, now: float) -> float | None:
        """Since when it has been quiet at `now` (None: busy now)."""
        if self.busy(now):
            return None
        past = [at for at in self.changes if at <= now]
        return past[-1] if past else -math.inf


def _work_schedule(rng: random.Random, start: float) -> WorkSchedule:
    busy_first = rng.random() < 0.7
    changes: list[float] = []
    at, busy = start, busy_first
    while at < start + 30 * H:
        at += rng.uniform(10 * M, 2 * H) if busy else rng.uniform(2 * M, 60 * M)
        changes.append(at)
        busy = not busy
    return WorkSchedule(tuple(changes), busy_first)


def names(world: World) -> Sequence[tuple[str, str]]:
    """Every (cluster, node type) of the world."""
    return [(c.name, n.name) for c in world.clusters for n in c.nodes]
