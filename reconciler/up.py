"""`ray-vast up`: the whole product in the foreground.

For a spec whose provider is `vastsim`, the embedded default comes first: a local vastsim whose
containers run the real bootloader and agent. Then each cluster's Ray head (token auth), and then
watch with the head's services, so the first tick rents, candidates enroll over TLS, and their Ray
nodes join. Ctrl-C stops reconciling and saves; the machines stay until `ray-vast down`.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from reconciler import downing, operations, rayruntime
from reconciler.deps import Deps
from reconciler.embedded import processes, rayhead, simulator
from reconciler.head.pki import ClusterPki
from reconciler.model.rayversions import TESTED_RAY_VERSION
from reconciler.model.records import Intent, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import load
from reconciler.views import diagnostics as diag_view
from reconciler.watch.controller import TickReport
from reconciler.watch.headside import cluster_pki, head_extension
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.raysignals import RaySignals
from reconciler.watch.runner import WatchOptions, watch
from reconciler.watch.source import SpecSource


@dataclass
class UpOptions:
    spec_path: Path
    auto_approve: bool = False
    max_ticks: int | None = None
    # set by the first SIGINT/SIGTERM (the CLI's `Interrupts`): the step in progress (the
    # simulator's start, a Ray head's start, a tick) finishes, and up stops there
    stop: threading.Event = field(default_factory=threading.Event)


def up(deps: Deps, options: UpOptions, logger: logging.Logger) -> int:
    loaded = load(options.spec_path)
    if not loaded.ok:
        diag_view.write_human(loaded.diagnostics, deps.err)
        return 1
    specs = list(loaded.clusters)
    # The Ray heads start while the simulator does (neither needs the other), and the watch
    # starts once every head's GCS takes connections (workers can join from then on) while the
    # heads finish starting: seconds off `up` -> the first worker
    gcs_up = threading.Event()
    heads = threading.Thread(
        target=_start_heads, args=(deps, specs, logger, options.stop, gcs_up), name="ray-heads"
    )
    heads.start()
    try:
        deps = _with_simulator(deps, specs, options.spec_path, logger)
    finally:
        gcs_up.wait()
    try:
        return _watch_up(deps, specs, options, logger)
    finally:
        heads.join()


def _watch_up(
    deps: Deps, specs: list[ClusterSpec], options: UpOptions, logger: logging.Logger
) -> int:
    """The watch of `up`, once the simulator runs and the Ray heads take workers."""
    if _stopped(options, logger):
        return 0
    signals = _ray_heads(deps, specs, logger, options.stop)
    if _stopped(options, logger) or signals is None:  # None: stopped while heads started
        return 0
    if not _approved(deps, specs, options):
        return 1
    provider = deps.provider(specs)
    vast_url = getattr(provider, "base_url", "") or deps.env.get("VAST_URL", "")
    extension = head_extension(
        state_dir=deps.state_dir, clock=deps.clock, vast_url=vast_url, secrets=_forbidden(deps)
    )
    watch_options = WatchOptions(
        source=SpecSource(options.spec_path),
        max_ticks=options.max_ticks,
        signals=signals,
        extension=extension,
        on_tick=LiveView(logger).show,
        stop=options.stop,
        bring_up=True,
    )
    logger.info(
        "up: watching %s (Ctrl-C stops reconciling; `ray-vast down` ends the machines)",
        ", ".join(s.name for s in specs),
    )
    return watch(deps, watch_options, logger)


def _stopped(options: UpOptions, logger: logging.Logger) -> bool:
    if not options.stop.is_set():
        return False
    logger.info(
        "up stopped before watching: nothing rented; what it started (the simulator, Ray "
        "heads) stays until `ray-vast down CLUSTER`"
    )
    return True


class LiveView:
    """One line per cluster whenever its picture changes: candidates, workers, $/h, detections."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.last: dict[str, str] = {}

    def show(self, report: TickReport) -> None:
        for found in report.detections:
            self.logger.info("detected %s on %s: %s", found.cls, found.record, found.detail)
        records = report.records
        if records is None:
            return
        for cluster in sorted({r.cluster for r in records.live_instances()} | set(self.last)):
            line = _summary(records, cluster)
            if self.last.get(cluster) != line:
                self.last[cluster] = line
                self.logger.info("%s: %s", cluster, line)


def _summary(records: Records, cluster: str) -> str:
    live = [r for r in records.live_instances(cluster) if r.intent is not Intent.DESTROYED]
    workers = sum(1 for r in live if r.role is Role.WORKER)
    candidates = len(live) - workers
    lost = sum(1 for r in live if r.lost)
    dph = sum(r.billing_dph for r in live)
    text = f"{workers} worker(s), {candidates} candidate(s), ${dph:.3f}/h"
    return text + (f", {lost} lost" if lost else "")


def _with_simulator(
    deps: Deps, specs: list[ClusterSpec], path: Path, logger: logging.Logger
) -> Deps:
    """The embedded vastsim, started (or found running) when a spec names it."""
    sims = [s for s in specs if s.provider.type == "vastsim"]
    if not sims:
        return deps
    market = sims[0].provider.market
    base = path if path.is_dir() else path.parent
    market_path = str((base / market).resolve()) if market else None
    sim = simulator.start(deps.state_dir, env=deps.env, market=market_path)
    logger.info("embedded vastsim at %s (pid %d)", sim.url, sim.pid)
    return replace(deps, env={**deps.env, **sim.env()})


def _ray_heads(
    deps: Deps, specs: list[ClusterSpec], logger: logging.Logger, stop: threading.Event
) -> RayReaders | None:
    """Each cluster's Ray head, with the token its workers are given, and a reader of each. A
    stop request lets the head being started finish starting, starts no other, and gives None.
    A cluster added by a reload gets its Ray head started and its reader then."""
    for spec in specs:
        if stop.is_set():
            return None
        _ray_head(deps, spec, logger)
    return RayReaders({s.name: s for s in specs}, make=lambda spec: _ray_reader(deps, spec, logger))


def _start_heads(
    deps: Deps,
    specs: list[ClusterSpec],
    logger: logging.Logger,
    stop: threading.Event,
    gcs_up: threading.Event,
) -> None:
    """Each cluster's Ray head process started and ready; `gcs_up` set once the last one's GCS
    takes connections (or this ends early). The readers come after, in the thread that
    watches: Ray's modules fail to import in two threads at once. A head that fails to start
    is tried again, and said, by `_ray_heads`."""
    try:
        for n, spec in enumerate(specs):
            if stop.is_set():
                return
            last = gcs_up.set if n == len(specs) - 1 else None
            try:
                _ray_head(deps, spec, logger, on_gcs=last)
            except Exception as exc:
                logger.debug("the Ray head of %s did not start here: %s", spec.name, exc)
    finally:
        gcs_up.set()


def _ray_head(
    deps: Deps,
    spec: ClusterSpec,
    logger: logging.Logger,
    *,
    on_gcs: Callable[[], None] | None = None,
) -> ClusterPki:
    """The cluster's Ray head, started unless it runs; its PKI (the Ray token is in it).
    `on_gcs`: called once its GCS takes connections (see `rayhead.start`)."""
    pki = cluster_pki(deps.state_dir, spec, deps.clock.now())
    if rayhead.running(deps.state_dir, spec.name) is None:
        head = rayhead.start(
            deps.state_dir,
            spec.name,
            port=spec.head.ray_port,
            token_path=pki.ray_auth_token_path,
            env=deps.env,
            dashboard=(dashboard_host(spec.head.address), spec.head.dashboard_port),
            on_gcs=on_gcs,
        )
        logger.info("Ray head of %s ready at %s (pid %d)", spec.name, head.address, head.pid)
        logger.info(
            "Ray dashboard and Jobs API of %s: %s (token: %s)",
            spec.name,
            spec.head.dashboard_url,
            pki.ray_auth_token_path,
        )
        ray = rayruntime.local().ray
        if ray != TESTED_RAY_VERSION:  # the workers follow the head; the packing follows Ray
            logger.warning(
                "Warning: the Ray head of %s runs Ray %s; ray-vast packs Ray's demand with Ray's "
                "own scheduler as Ray %s has it (install ray[default]==%s to be sure)",
                spec.name,
                ray,
                TESTED_RAY_VERSION,
                TESTED_RAY_VERSION,
            )
    return pki


def dashboard_host(address: str) -> str:
    """Where the dashboard listens: the head's address when it is an IP address (127.0.0.1
    keeps it on this machine), every interface when it is a name."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "0.0.0.0"  # noqa: S104 - a DNS name: the head's interfaces, behind Ray's token
    return address


def _ray_reader(deps: Deps, spec: ClusterSpec, logger: logging.Logger) -> RaySignals:
    pki = _ray_head(deps, spec, logger)
    address = f"{spec.head.address}:{spec.head.ray_port}"
    return RaySignals(address, spec.name, token_path=str(pki.ray_auth_token_path))


def _approved(deps: Deps, specs: list[ClusterSpec], options: UpOptions) -> bool:
    """The simulator costs nothing: no question. Real money: the plan first, and a 'yes'."""
    if options.auto_approve or all(s.provider.type == "vastsim" for s in specs):
        return True
    outcome = operations.make_plan(
        deps, specs, spec_path=options.spec_path, out_file=None, as_json=False, detailed=False
    )
    if outcome.plan.errored:
        return False
    try:
        operations.confirm(deps)
    except operations.OperationError as exc:
        deps.err.write(f"Error: {exc}\n")
        return False
    return True


def _forbidden(deps: Deps) -> tuple[str, ...]:
    """Secrets a create request must never carry: the account key (never the simulator's)."""
    return tuple(s for s in deps.secrets() if s)


def with_embedded(deps: Deps) -> Deps:
    """Talk to the embedded simulator when this state directory runs one (after `up`)."""
    sim = simulator.running(deps.state_dir)
    return replace(deps, env={**deps.env, **sim.env()}) if sim else deps


def ray_head_stop(deps: Deps, cluster: str) -> downing.HeadStop | None:
    """The cluster's Ray head for `down` to stop after its confirmation, if ray-vast runs it."""
    head = rayhead.running(deps.state_dir, cluster)
    if head is None:
        return None
    return downing.HeadStop(
        description=(
            f"the Ray head of {cluster} at {head.address} (pid {head.pid}), "
            "and with it every Ray node joined to it"
        ),
        stop=lambda: rayhead.stop(deps.state_dir, cluster),
    )


def stop_simulator_if_unused(deps: Deps) -> bool:
    """After `down`: the embedded simulator, once no cluster's Ray head needs it."""
    if any(name.startswith("ray-head-") for name in processes.records(deps.state_dir)):
        return False
    return simulator.stop(deps.state_dir)
