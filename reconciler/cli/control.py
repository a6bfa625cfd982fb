"""The commands that keep running: `up` (apply, then watch, with a local Ray head) and `watch`.

Both install `Interrupts` (the first SIGINT/SIGTERM finishes the tick and saves, a second exits
at once), configure the log, and hand the loop to `reconciler.up` or `reconciler.watch.runner`.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from reconciler import up as up_mod
from reconciler.cli import context
from reconciler.cli.interrupts import Interrupts
from reconciler.cli.options import (
    TICK_FIRST_SIGNAL,
    AutoApprove,
    LockTimeout,
    SpecDir,
    StateDirOption,
)
from reconciler.spec.loader import load
from reconciler.watch import logs as watch_logs
from reconciler.watch import runner as watch_runner
from reconciler.watch.headside import head_extension
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.runner import WatchOptions
from reconciler.watch.source import GitSync, SpecSource


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast up examples/clusters/local-sim.yaml\n\n"
        "  ray-vast up clusters/ --auto-approve\n\n"
        "Ctrl-C stops reconciling and saves (twice: at once); the machines stay until "
        "`ray-vast down CLUSTER`."
    )
)
def up(
    spec_dir: SpecDir = Path("."),
    auto_approve: AutoApprove = False,
    log_format: Annotated[
        str, typer.Option("--log-format", help="text or json (one object a line).")
    ] = "text",
    max_ticks: Annotated[
        int | None, typer.Option("--max-ticks", help="Stop after this many ticks (for scripts).")
    ] = None,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Apply, then watch in the foreground, with the head's services and a local Ray head.

    A spec with `provider.type: vastsim` runs on an embedded simulator: no account, no network.
    """
    # The stop event comes first: `Deps` is built with it, the log with `Deps`' secrets (the
    # embedded simulator's key among them), and `Interrupts` with the log and the event.
    stop = threading.Event()
    deps = context.deps(state_dir, lock_timeout, stop_requested=stop.is_set)
    logger = watch_logs.configure(log_format, sys.stderr, deps.secrets())
    interrupts = Interrupts(first=TICK_FIRST_SIGNAL, logger=logger, stop=stop)
    options = up_mod.UpOptions(
        spec_dir, auto_approve=auto_approve, max_ticks=max_ticks, stop=interrupts.stop
    )
    with context.reported(deps), interrupts.installed():
        code = up_mod.up(deps, options, logger)
    raise typer.Exit(code)


@context.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast watch clusters/\n\n"
        "  ray-vast watch --git https://git.example.org/ops/clusters.git --branch main\n\n"
        "  ray-vast watch clusters/ --log-format json --once"
    )
)
def watch(
    spec_dir: SpecDir = Path("."),
    git: Annotated[
        str | None,
        typer.Option("--git", help="A Git remote holding the specs; pulled every interval."),
    ] = None,
    branch: Annotated[
        str, typer.Option("--branch", help="The branch of --git to follow.")
    ] = "main",
    git_interval: Annotated[
        float, typer.Option("--git-interval", help="Seconds between pulls of --git.", min=5)
    ] = 60.0,
    log_format: Annotated[
        str, typer.Option("--log-format", help="text or json (one object a line).")
    ] = "text",
    once: Annotated[bool, typer.Option("--once", help="Run one tick and exit.")] = False,
    allow_mass_destroy: Annotated[
        bool,
        typer.Option(
            "--allow-mass-destroy",
            help="Carry out policy destroys of most of a cluster (a removed spec) unattended; "
            "without it they are held with an alert.",
        ),
    ] = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """The controller: reconcile on every tick and on every spec change, run the watchdogs.

    With --git, SPEC_DIR is where the repository is checked out (and pulled); the revision acted
    on is logged. SIGTERM or Ctrl-C finishes the tick, saves and exits; a second one exits at once.
    """
    if log_format not in ("text", "json"):
        typer.echo("Error: --log-format is text or json", err=True)
        raise typer.Exit(1)
    stop = threading.Event()  # first, as in `up`
    deps = context.deps(state_dir, lock_timeout, stop_requested=stop.is_set)
    logger = watch_logs.configure(log_format, sys.stderr, deps.secrets())
    interrupts = Interrupts(first=TICK_FIRST_SIGNAL, logger=logger, stop=stop)
    sync = GitSync(git, branch, spec_dir.resolve(), git_interval, deps.clock) if git else None
    with context.reported(deps), interrupts.installed():
        if sync is not None:
            sync.sync()
        options = WatchOptions(
            source=SpecSource(spec_dir, git=sync),
            once=once,
            allow_mass_destroy=allow_mass_destroy,
            signals=_ray_readers(deps.state_dir, spec_dir),
            extension=head_extension(
                state_dir=deps.state_dir, clock=deps.clock, vast_url=None, secrets=deps.secrets()
            ),
            stop=interrupts.stop,
        )
        code = watch_runner.watch(deps, options, logger)
    raise typer.Exit(code)


def _ray_readers(state_dir: Path, spec_dir: Path) -> RayReaders | None:
    """Ray's view from each cluster's own head, made here, in the command's thread, before the
    services start (Ray's modules fail to import in two threads at once: `RaySignals`); None
    when the specs do not load (the runner says why and exits). The runner loads the specs again
    to act on them: one load for both is the runner's to compose."""
    loaded = load(spec_dir)
    if not loaded.ok:
        return None
    return RayReaders.from_pki(state_dir, {s.name: s for s in loaded.clusters})
