"""`ray-vast watch`: hold the state lock, serve, and tick until told to stop.

The stop event (`WatchOptions.stop`; the CLI's `Interrupts` sets it on SIGTERM or SIGINT, and a
second signal exits at once) ends the loop: the tick in progress finishes and saves, the services
stop, the lock is released. Spec changes (a file edited, a Git revision pulled) take effect on the
next loop turn, at most a second away, without waiting for the reconcile cadence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from reconciler.applying.journal import Journal
from reconciler.applying.launch import ImageLauncher, Launcher
from reconciler.applying.provider import Provider
from reconciler.deps import Deps
from reconciler.model.applied import lifted
from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import LoadResult
from reconciler.state.backend import lease_seconds
from reconciler.state.errors import LockLostError, StateLockedError
from reconciler.state.ledger import ledger_path
from reconciler.state.sql.ledger import SqlLedger
from reconciler.state.tails import FileTail, LedgerTail, SqlTail
from reconciler.views import diagnostics as diag_view
from reconciler.watch.containment import FAILURE_BACKOFF
from reconciler.watch.controller import Controller, TickReport
from reconciler.watch.metrics import DollarCounter, Gauges, MetricsServer
from reconciler.watch.notify import RevisionStatus
from reconciler.watch.orders import Doorbell, mailbox, take_orders
from reconciler.watch.served import Served
from reconciler.watch.signals import AgentSignals, Signals
from reconciler.watch.source import GitError, SpecSource

# How long the loop sleeps at most between looks at the spec directory.
POLL_SECONDS = 1.0


class Service(Protocol):
    """Something watch runs beside the loop (the head's enrollment and heartbeat servers)."""

    def stop(self) -> None: ...


@runtime_checkable
class Reloadable(Protocol):
    """A service that follows a reload of the specs (a cluster added, changed, removed)."""

    def stop(self) -> None: ...

    def reload(self, specs: Mapping[str, ClusterSpec]) -> None: ...


@runtime_checkable
class AlertCounting(Protocol):
    """A service that counts the alerts it did not add again (the head: the same alert within a
    minute), for the metrics."""

    def alert_repeats(self) -> Mapping[tuple[str, str], int]: ...


# Builds the launcher and the services for a controller (the head, when workers run the agent).
Extension = Callable[[Controller, Journal], tuple[Launcher, list[Service]]]


@dataclass
class WatchOptions:
    source: SpecSource
    once: bool = False
    max_ticks: int | None = None
    metrics: bool = True
    signals: Signals | None = None
    extension: Extension | None = None
    allow_mass_destroy: bool = False
    on_tick: Callable[[TickReport], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # `up`: its clusters are brought up, so a `down`'s hold of them lifts (a plain `watch`
    # keeps a held cluster down until its spec changes or it is applied again); and once
    # `down` holds every one of them down and nothing of them is left, `up` has no more to do.
    bring_up: bool = False


def watch(deps: Deps, options: WatchOptions, logger: logging.Logger) -> int:
    loaded = options.source.poll()
    if loaded is None or not loaded.ok:
        _report_invalid(deps, loaded)
        return 1
    specs = list(loaded.clusters)
    provider = deps.provider(specs)
    said = False
    while True:
        try:
            with deps.journal("watch") as journal:
                if said:
                    logger.info("standby: the state's lease is ours now; reconciling")
                if options.bring_up:
                    journal.update(lambda records: lifted(records, [s.name for s in specs]))
                controller = _controller(
                    deps, journal, provider, specs=specs, options=options, logger=logger
                )
                return _loop(deps, controller, options, logger)
        except StateLockedError as exc:
            if not _standing_by(deps, exc):
                raise
            if not said:
                logger.info("%s", _standby_line(exc))
                said = True
            if options.stop.wait(_standby_poll(deps)):
                logger.info("standby stopped before it held the lease")
                return 0


def _standing_by(deps: Deps, refused: StateLockedError) -> bool:
    """A second watch on a shared (database) state waits as a standby for the active one's
    lease, rather than failing (DESIGN.md 11); on a state of files it is refused as before."""
    return deps.in_database and refused.info.operation in ("watch", "up")


def _standby_line(refused: StateLockedError) -> str:
    info, left = refused.info, refused.lease_left
    lapse = f"; its lease lapses in {left:.0f} s unless renewed" if left is not None else ""
    return (
        f"standby: `{info.operation}` (pid {info.pid} on {info.host}, lock {info.id}) holds the"
        f" state's lease{lapse}; this watch takes over when that holder is gone"
    )


def _standby_poll(deps: Deps) -> float:
    """How often a standby asks for the lease: a quarter lease (at most 5 s), so it holds the
    lease soon after the active holder's lapses."""
    return min(5.0, lease_seconds(deps.env) / 4)


def _controller(
    deps: Deps,
    journal: Journal,
    provider: Provider,
    *,
    specs: list[ClusterSpec],
    options: WatchOptions,
    logger: logging.Logger,
) -> Controller:
    controller = Controller(
        specs={s.name: s for s in specs},
        journal=journal,
        provider=provider,
        launcher=ImageLauncher(),
        clock=deps.clock,
        progress=logger.info,
        prune=options.source.path.is_dir(),
        allow_mass_destroy=options.allow_mass_destroy,
        # the first signal stops a tick's plan after the call in flight, not after the plan
        stop_requested=options.stop.is_set,
        signals=options.signals or AgentSignals(),
        demand_check_seconds=DEMAND_CHECK_SECONDS if options.signals is not None else None,
    )
    if options.source.revision:
        controller.set_specs(controller.declared, revision=options.source.revision)
        logger.info("specs at revision %s", options.source.revision)
    return controller


def _services(controller: Controller, options: WatchOptions) -> list[Service]:
    services: list[Service] = []
    if options.extension is not None:
        controller.launcher, services = options.extension(controller, controller.journal)
    if isinstance(controller.signals, Reloadable):
        # Ray's readers follow the specs as the head services do, after them: a cluster whose
        # token the head services just made gets its reader now
        controller.signals.reload(controller.specs)
        services = [*services, controller.signals]
    return services


def _loop(deps: Deps, controller: Controller, options: WatchOptions, logger: logging.Logger) -> int:
    services = _services(controller, options)
    gauges = Gauges()
    metrics = _metrics(controller, gauges, logger) if options.metrics else None
    # the orphans' dollars are read from the ledger's new entries: a file's, or the database's
    dollars = DollarCounter(deps.clock.now(), _tail(deps, controller)) if metrics else None
    served = Served()
    told = RevisionStatus(deps.env, logger)
    told.say(options.source.revision, "success", "reconciling " + ", ".join(controller.specs))
    ticks = 0
    failures = 0  # loop turns in a row that raised past the controller's own containment
    bell = Doorbell(mailbox(controller, deps.state_dir))
    try:
        while not options.stop.is_set():
            try:
                going = _turn(
                    deps, controller, options, logger, services=services, served=served, told=told
                )
                if not going:
                    break
                started = time.monotonic()
                report = controller.tick()
                _follow(served, services, controller)
            except LockLostError as exc:
                logger.error("%s", exc)  # another ray-vast may act on the state now: stop
                return EXIT_LOCK_LOST
            except Exception:
                failures += 1
                wait = FAILURE_BACKOFF.after(failures)
                logger.exception("the tick failed; tried again in %.0f s", wait)
                ticks += 1
                if _enough(options, ticks):
                    break
                bell.wait(deps.clock, options.stop, wait)
                continue
            failures = 0
            ticks += 1
            elapsed = time.monotonic() - started
            _refresh(gauges, controller, elapsed, ticks, services, dollars=dollars)
            if options.on_tick:
                options.on_tick(report)
            if _enough(options, ticks):
                break
            wait = controller.next_wakeup(deps.clock.now())
            bell.wait(deps.clock, options.stop, min(wait, POLL_SECONDS))
    finally:
        bell.close()
        for service in services:
            service.stop()
        # the head's destroys already asked for are still made (their intent is saved anyway)
        controller.applier.stop(timeout=STOP_DRAIN_SECONDS)
        if metrics is not None:
            metrics.close()
    logger.info("watch stopped after %d tick(s); state saved", ticks)
    return 0


# A watch whose state lock was lost (lapsed, force-unlocked, taken over) exits with this, as any
# command that stopped on an error does.
EXIT_LOCK_LOST = 1
# How often Ray's demand is read between reconciles when Ray is read (GCS only, no vast call).
DEMAND_CHECK_SECONDS = 2.0
# How long a stopping watch waits for the head's destroys already handed to the applier.
STOP_DRAIN_SECONDS = 30.0


def _follow(
    served: Served, services: Sequence[Service], controller: Controller, *, force: bool = False
) -> None:
    """The head services and Ray's readers serve the declared clusters and the removed ones
    whose machines pins still hold (`watch.served`)."""
    followers = [s for s in services if isinstance(s, Reloadable)]
    records = controller.journal.records()
    served.follow(followers, controller.specs, records, controller.journal.lineage, force=force)


def _reload(
    source: SpecSource,
    controller: Controller,
    deps: Deps,
    logger: logging.Logger,
    services: Sequence[Service] = (),
    *,
    served: Served | None = None,
    told: RevisionStatus | None = None,
) -> None:
    try:
        loaded = source.poll()
    except GitError as exc:
        logger.warning("spec repository not refreshed: %s", exc)
        return
    if loaded is None:
        return
    if not loaded.ok:
        logger.warning("specs changed but do not load; the previous specs stay in force")
        _report_invalid(deps, loaded)
        first = loaded.diagnostics.errors()[:1]
        detail = diag_view.human_line(first[0]) if first else "the spec directory does not load"
        for name in controller.declared:
            controller.raise_alert(
                name,
                "specs_invalid",
                f"the spec directory does not load ({detail}); the last good specs stay in force",
                now=deps.clock.now(),
            )
        if told is not None:
            told.say(source.revision, "failure", f"specs do not load: {detail}")
        return
    controller.set_specs({s.name: s for s in loaded.clusters}, revision=source.revision)
    # what depends on the specs follows them (the head services, Ray's readers)
    _follow(served or Served(), services, controller, force=True)
    revision = f" at revision {source.revision}" if source.revision else ""
    names = ", ".join(s.name for s in loaded.clusters)
    logger.info("specs reloaded%s: %s", revision, names)
    if told is not None:
        told.say(source.revision, "success", f"reconciling {names}")


def _report_invalid(deps: Deps, loaded: LoadResult | None) -> None:
    if loaded is None:
        deps.err.write("Error: no specs to watch\n")
        return
    diag_view.write_human(loaded.diagnostics, deps.err)


def _turn(
    deps: Deps,
    controller: Controller,
    options: WatchOptions,
    logger: logging.Logger,
    *,
    services: Sequence[Service],
    served: Served,
    told: RevisionStatus,
) -> bool:
    """A loop turn's start: the lease still ours, the specs' changes, the orders left; False
    once `up` has nothing left to do (`down` took every cluster of it down)."""
    controller.journal.check_lease()
    _reload(options.source, controller, deps, logger, services, served=served, told=told)
    take_orders(mailbox(controller, deps.state_dir), controller, logger)
    if options.bring_up and _all_down(controller):
        logger.info("every cluster is down (`ray-vast down`): up stops")
        return False
    return True


def _enough(options: WatchOptions, ticks: int) -> bool:
    return options.once or (options.max_ticks is not None and ticks >= options.max_ticks)


def _all_down(controller: Controller) -> bool:
    """`down` holds every declared cluster down and no machine of theirs is left live."""
    if not controller.declared or controller.specs:
        return False
    return not any(controller.records().live_instances(name) for name in controller.declared)


def _tail(deps: Deps, controller: Controller) -> LedgerTail:
    ledger = controller.journal.ledger
    return (
        SqlTail(ledger) if isinstance(ledger, SqlLedger) else FileTail(ledger_path(deps.state_dir))
    )


def _metrics(
    controller: Controller, gauges: Gauges, logger: logging.Logger
) -> MetricsServer | None:
    spec = next(iter(controller.declared.values()))
    try:
        server = MetricsServer("127.0.0.1", spec.head.metrics_port, lambda: gauges).start()
    except OSError as exc:
        logger.warning("metrics endpoint not started on port %d: %s", spec.head.metrics_port, exc)
        return None
    logger.info("metrics at http://127.0.0.1:%d/metrics", server.port)
    return server


def _refresh(
    gauges: Gauges,
    controller: Controller,
    seconds: float,
    ticks: int,
    services: Sequence[Service] = (),
    *,
    dollars: DollarCounter | None = None,
) -> None:
    gauges.records = controller.records()
    gauges.now = controller.clock.now()
    if dollars is not None:
        gauges.dollars = dollars.update(gauges.records, gauges.now)
    repeats: dict[tuple[str, str], int] = {}
    for service in services:
        if isinstance(service, AlertCounting):
            for key, n in service.alert_repeats().items():
                repeats[key] = repeats.get(key, 0) + n
    gauges.alert_repeats = repeats
    gauges.detections_by_net = dict(controller.detections_by_net)
    counters = getattr(controller.provider, "counters", None)
    gauges.requests = dict(counters) if isinstance(counters, Mapping) else {}
    gauges.tick_seconds = seconds
    gauges.ticks = ticks


def source_for(path: Path) -> SpecSource:
    return SpecSource(path)
