"""The `ray-vast` command: a thin shell that parses, builds dependencies, renders, and exits.

Nothing below this module reads the environment, the clock or the terminal by itself; commands
gather those here and pass them down, which is what lets tests drive every command in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from reconciler import __version__, operations, planfile
from reconciler import up as up_mod
from reconciler.clock import SystemClock
from reconciler.deps import Deps, state_dir_from
from reconciler.head.pki import RAY_TOKEN_FILE, pki_dir
from reconciler.model import cost as cost_model
from reconciler.model.codec import encode
from reconciler.model.spec import ClusterSpec
from reconciler.planning.pins import PinOrder
from reconciler.spec.loader import load
from reconciler.state.errors import StateError
from reconciler.state.ledger import LedgerLineSkipped, LedgerQuery, ledger_path, read_ledger
from reconciler.state.lock import Identity
from reconciler.vast.errors import VastError
from reconciler.views import diagnostics as diag_view
from reconciler.views import ledger as ledger_view
from reconciler.watch import logs as watch_logs
from reconciler.watch import runner as watch_runner
from reconciler.watch.headside import head_extension
from reconciler.watch.interrupts import Interrupts
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.raysignals import RaySignals
from reconciler.watch.runner import WatchOptions
from reconciler.watch.source import GitError, GitSync, SpecSource

app = typer.Typer(
    name="ray-vast",
    help=(
        "Rent vast.ai machines as Ray workers, declaratively, and keep the bill safe.\n\n"
        "Cluster specs are YAML files in a directory (a Git repository); `plan` shows what would "
        "change, `apply` does it, `watch` keeps it so."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

SpecDir = Annotated[
    Path,
    typer.Argument(help="A directory of cluster specs (searched recursively) or one YAML file."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output (versioned).")]
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where state.json, its lock and ledger.jsonl live. "
        "Default: $RAY_VAST_STATE_DIR, else .ray-vast/ in the working directory.",
    ),
]
LockTimeout = Annotated[
    float,
    typer.Option("--lock-timeout", help="Seconds to wait for the state lock.", min=0),
]
AutoApprove = Annotated[
    bool, typer.Option("--auto-approve", help="Do not ask for 'yes' before acting.")
]
MassDestroy = Annotated[
    bool,
    typer.Option(
        "--allow-mass-destroy",
        help="Allow a plan that destroys most of a cluster by policy (spec removed, "
        "max_workers cut, orphans).",
    ),
]


# What the first SIGINT/SIGTERM does in watch and up, as they say it (a second exits at once).
TICK_FIRST_SIGNAL = "finishing the tick, then stopping; the state is saved"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ray-vast {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Rent vast.ai machines as Ray workers, declaratively, and keep the bill safe."""


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast validate examples/clusters\n\n"
        "  ray-vast validate clusters/prod.yaml --json\n\n"
        "Exit status: 0 when every spec is valid, 1 when any is not."
    )
)
def validate(
    spec_dir: SpecDir = Path("."),
    as_json: JsonFlag = False,
) -> None:
    """Check cluster specs against the schema and the rules, without touching anything.

    Every problem is reported at once, each with file, line, column and field.
    """
    result = load(spec_dir)
    names = [c.name for c in result.clusters]
    if as_json:
        payload = diag_view.validate_json(result.diagnostics, names, result.files)
        typer.echo(json.dumps(payload, indent=2))
    else:
        diag_view.write_human(result.diagnostics, sys.stderr)
        summary = diag_view.validate_summary(result.diagnostics, names, result.files)
        typer.echo(summary, err=not result.ok)
    raise typer.Exit(0 if result.ok else 1)


def _deps(state_dir: Path | None, lock_timeout: float = 0.0) -> Deps:
    """The dependencies of a command; with the embedded simulator's address when `up` runs one
    for this state directory (and VAST_URL does not say otherwise)."""
    env = dict(os.environ)
    deps = Deps(
        clock=SystemClock(),
        env=env,
        state_dir=state_dir_from(state_dir, env, Path.cwd()),
        out=sys.stdout,
        err=sys.stderr,
        interactive=sys.stdin.isatty(),
        ask=input,
        lock_timeout=lock_timeout,
    )
    return deps if "VAST_URL" in env else up_mod.with_embedded(deps)


def _specs(path: Path, *, warn: bool = False) -> list[ClusterSpec]:
    """Load specs or exit 1 with every diagnostic; nothing is touched on a bad spec. `warn`:
    the warnings of specs that load are said too (on stderr, as `validate` says them)."""
    result = load(path)
    if not result.ok:
        diag_view.write_human(result.diagnostics, sys.stderr)
        typer.echo(diag_view.validate_summary(result.diagnostics, [], result.files), err=True)
        raise typer.Exit(1)
    if warn:
        diag_view.write_human(result.diagnostics, sys.stderr)
    return list(result.clusters)


@contextlib.contextmanager
def _reported(deps: Deps) -> Iterator[None]:
    """Known failures become one clear message and exit status 1; never a traceback. The vast
    clients the command opened are closed however it ends."""
    try:
        yield
    except (
        operations.OperationError,
        StateError,
        VastError,
        planfile.PlanFileError,
        GitError,
    ) as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None
    except ValueError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        deps.close()


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast plan examples/clusters\n\n"
        "  ray-vast plan clusters -out ci.plan --json --detailed-exitcode\n\n"
        "Exit status: 0 success (with --detailed-exitcode: no changes), 1 error, "
        "2 changes (with --detailed-exitcode)."
    )
)
def plan(
    spec_dir: SpecDir = Path("."),
    out: Annotated[
        Path | None, typer.Option("-out", "--out", help="Save the plan for `apply FILE`.")
    ] = None,
    as_json: JsonFlag = False,
    detailed_exitcode: Annotated[
        bool, typer.Option("--detailed-exitcode", help="Exit 2 when there are changes.")
    ] = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Show what would be rented, stopped and destroyed, and what it does to $/h.

    Compares the specs with vast's live listing and the state file; changes nothing at vast.
    """
    specs = _specs(spec_dir, warn=True)
    deps = _deps(state_dir, lock_timeout)
    with _reported(deps):
        outcome = operations.make_plan(
            deps,
            specs,
            spec_path=spec_dir.resolve(),
            out_file=out,
            as_json=as_json,
            detailed=detailed_exitcode,
        )
    raise typer.Exit(outcome.exit_code)


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast apply examples/clusters\n\n"
        "  ray-vast apply ci.plan\n\n"
        "  ray-vast apply clusters --auto-approve\n\n"
        "A saved plan is applied exactly, or refused as stale."
    )
)
def apply(
    target: Annotated[
        Path, typer.Argument(help="A spec directory or YAML file, or a plan file from -out.")
    ] = Path("."),
    auto_approve: AutoApprove = False,
    allow_mass_destroy: MassDestroy = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Carry out a plan: rent, stop and destroy at vast, saving state after every call."""
    deps = _deps(state_dir, lock_timeout)
    interrupts = Interrupts(err=sys.stderr)
    deps.stop_requested = interrupts.requested
    with _reported(deps), interrupts.installed():
        if planfile.looks_like_plan(target):
            saved = _saved_plan(target)
            specs = _specs(Path(saved.spec_path))
            code = operations.apply_saved(deps, saved, specs, allow_mass_destroy=allow_mass_destroy)
        else:
            specs = _specs(target, warn=True)
            code = operations.apply_specs(
                deps,
                specs,
                auto_approve=auto_approve,
                allow_mass_destroy=allow_mass_destroy,
                spec_path=target,
            )
    raise typer.Exit(code)


def _saved_plan(path: Path) -> planfile.SavedPlan:
    """The saved plan at `path`, or a refusal that says what to do."""
    try:
        return planfile.read(path)
    except planfile.PlanFileError as exc:
        raise planfile.PlanFileError(
            f"{exc}. Nothing was applied: make a new plan with `ray-vast plan SPEC_DIR -out "
            f"{path}` and apply that."
        ) from exc


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast down local-sim\n\n"
        "  ray-vast down rtx4090-pool --spec-dir clusters --auto-approve"
    )
)
def down(
    cluster: Annotated[str, typer.Argument(help="The cluster name (metadata.name).")],
    spec_dir: Annotated[
        Path | None,
        typer.Option("--spec-dir", help="Specs to find the cluster's provider URL in."),
    ] = None,
    auto_approve: AutoApprove = False,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Destroy every instance that carries the cluster's label, and wait until vast confirms.

    Instances of the cluster made by another state (a lost or copied state file) are listed
    and destroyed too. The cluster's Ray head, when ray-vast runs it, is stopped after the
    confirmation, under the state lock: a declined `down` ends nothing.
    """
    specs = _specs(spec_dir) if spec_dir else []
    deps = up_mod.with_embedded(_deps(state_dir, lock_timeout))
    interrupts = Interrupts(err=sys.stderr)
    deps.stop_requested = interrupts.requested
    with _reported(deps), interrupts.installed():
        head = up_mod.ray_head_stop(deps, cluster)
        code = operations.down(deps, cluster, specs, auto_approve=auto_approve, head=head)
        if code == 0 and up_mod.stop_simulator_if_unused(deps):
            typer.echo("Embedded vastsim stopped.")
    raise typer.Exit(code)


@app.command(
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
    deps = _deps(state_dir, lock_timeout)
    logger = watch_logs.configure(log_format, sys.stderr, deps.secrets())
    interrupts = Interrupts(first=TICK_FIRST_SIGNAL, logger=logger)
    deps.stop_requested = interrupts.requested
    options = up_mod.UpOptions(
        spec_dir, auto_approve=auto_approve, max_ticks=max_ticks, stop=interrupts.stop
    )
    with _reported(deps), interrupts.installed():
        code = up_mod.up(deps, options, logger)
    raise typer.Exit(code)


@app.command(
    epilog=(
        "Examples:\n\n  ray-vast status\n\n  ray-vast status clusters --json\n\n"
        "Per instance: whether work holds it (`pinned: ray work`, `pinned by alice@box until "
        "14:05 UTC`); per cluster: alerts waiting for a person and paused node types."
    )
)
def status(
    spec_dir: Annotated[
        Path | None, typer.Argument(help="Specs, for caps and the provider URL.")
    ] = None,
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Clusters, their instances with phase, age, $/h and holds, alerts, breakers, the total."""
    specs = _specs(spec_dir) if spec_dir else []
    deps = _deps(state_dir)
    with _reported(deps):
        code = operations.status(deps, specs, as_json=as_json)
    raise typer.Exit(code)


@app.command(
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
    deps = _deps(state_dir, lock_timeout)
    logger = watch_logs.configure(log_format, sys.stderr, deps.secrets())
    interrupts = Interrupts(first=TICK_FIRST_SIGNAL, logger=logger)
    deps.stop_requested = interrupts.requested
    sync = GitSync(git, branch, spec_dir.resolve(), git_interval, deps.clock) if git else None
    options = WatchOptions(
        source=SpecSource(spec_dir, git=sync),
        once=once,
        allow_mass_destroy=allow_mass_destroy,
        extension=head_extension(
            state_dir=deps.state_dir, clock=deps.clock, vast_url=None, secrets=deps.secrets()
        ),
        stop=interrupts.stop,
    )
    with _reported(deps), interrupts.installed():
        if sync is not None:
            sync.sync()
        options.signals = _ray_signals(deps, spec_dir)
        code = watch_runner.watch(deps, options, logger)
    raise typer.Exit(code)


def _ray_signals(deps: Deps, spec_dir: Path) -> RayReaders | None:
    """Ray's view from each cluster's own head, for the clusters whose token is there (the head's
    Ray runs with the token from the cluster's PKI: `ray-vast up` starts it that way); a cluster
    added by a reload, or whose token appears, gets its reader at the reload."""
    loaded = load(spec_dir)
    if not loaded.ok:
        return None

    def reader(spec: ClusterSpec) -> RaySignals | None:
        token = pki_dir(deps.state_dir, spec.name) / RAY_TOKEN_FILE
        if not token.exists():
            return None
        address = f"{spec.head.address}:{spec.head.ray_port}"
        return RaySignals(address, spec.name, token_path=str(token))

    return RayReaders({s.name: s for s in loaded.clusters}, make=reader)


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast ledger --cluster local-sim --since 1h\n\n"
        "  ray-vast ledger --class went_silent --json\n\n"
        "  ray-vast ledger --instance 20000001"
    )
)
def ledger(
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only this cluster.")] = None,
    cls: Annotated[
        str | None, typer.Option("--class", help="Only this class (e.g. went_silent).")
    ] = None,
    instance: Annotated[
        int | None, typer.Option("--instance", help="Only this vast instance id.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="30m, 2h, 1d, an ISO time or epoch seconds.")
    ] = None,
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Every detection, decision, provider call and outcome, oldest first."""
    deps = _deps(state_dir)
    with _reported(deps):
        start = ledger_view.parse_since(since, deps.clock.now()) if since else None
        query = LedgerQuery(cluster=cluster, class_=cls, instance=instance, since=start)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LedgerLineSkipped)
            entries = list(read_ledger(ledger_path(deps.state_dir), query))
    _say_skipped(caught)
    if as_json:
        for entry in entries:
            typer.echo(json.dumps(entry.to_json()))
        return
    typer.echo(ledger_view.human(entries), nl=False)


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast cost\n\n"
        "  ray-vast cost --since 1d --by node-type\n\n"
        "  ray-vast cost clusters --since 2026-09-01 --until 2026-09-08 --by cause --json\n\n"
        "Causes: serving; idle (quiet but kept: the idle timers armed); booting (rented, not "
        "serving yet); failed (ended without ever serving); extra_candidate; orphan; stopped "
        "(storage while stopped). Reads the state and the ledger; vast is not called."
    )
)
def cost(
    spec_dir: Annotated[
        Path | None, typer.Argument(help="Specs: only the clusters they declare.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From: 30m, 2h, 1d ago, an ISO time or epoch seconds."),
    ] = None,
    until: Annotated[
        str | None,
        typer.Option("--until", help="To (default now): 30m, 2h, 1d ago, an ISO time or epoch."),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", help="Group by cluster, node-type, cause or instance.")
    ] = "cluster",
    as_json: JsonFlag = False,
    state_dir: StateDirOption = None,
) -> None:
    """Dollars the machines cost, at vast's per-second prices, by cause."""
    if by not in cost_model.BY_KEYS:
        typer.echo(f"Error: --by is one of {', '.join(cost_model.BY_KEYS)}", err=True)
        raise typer.Exit(1)
    specs = _specs(spec_dir) if spec_dir else []
    deps = _deps(state_dir)
    with _reported(deps):
        now = deps.clock.now()
        start = ledger_view.parse_since(since, now) if since else None
        end = ledger_view.parse_since(until, now) if until else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LedgerLineSkipped)
            code = operations.cost(deps, specs, since=start, until=end, by=by, as_json=as_json)
    _say_skipped(caught)
    raise typer.Exit(code)


def _say_skipped(caught: list[warnings.WarningMessage]) -> None:
    """Ledger lines that could not be read, said once each on stderr; other warnings as ever."""
    for warning in caught:
        if issubclass(warning.category, LedgerLineSkipped):
            typer.echo(f"Warning: {warning.message}", err=True)
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast simulate examples/clusters --hours 24\n\n"
        "  ray-vast simulate clusters --seed 7 --failures rates.yaml --json\n\n"
        "A failure mix file gives weights of the fates a rental meets (stall, boot, dies, "
        "net_drop, idle, healthy) and orphans_per_day; what it leaves out is the fleet "
        "benchmark's. No account, no network: vastsim on virtual time."
    )
)
def simulate(
    spec_dir: SpecDir = Path("."),
    hours: Annotated[
        float, typer.Option("--hours", help="Simulated hours in which failures begin.", min=0.1)
    ] = 24.0,
    seed: Annotated[int, typer.Option("--seed", help="The scenario's seed.")] = 1,
    failures: Annotated[
        Path | None,
        typer.Option("--failures", help="A YAML failure mix (default: the fleet benchmark's)."),
    ] = None,
    as_json: JsonFlag = False,
    keep: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Keep the run's state and ledger in this new directory (for `ray-vast cost`, "
            "`ledger`, `state` with --state-dir). Default: not kept.",
        ),
    ] = None,
) -> None:
    """Price your specs before renting: ray-vast on virtual time against a failure mix.

    The whole engine (controller, heads, the agent's state machine in every container) runs on
    an in-process vastsim, with Ray's demand stepping between each node type's min and max
    workers; it prints dollars by cause, waste against the floor, false destroys and leaks.
    """
    _specs(spec_dir, warn=True)
    argv = [sys.executable, "-m", "fleetsim", str(spec_dir), "--hours", f"{hours:g}"]
    argv += ["--seed", str(seed)]
    if failures is not None:
        argv += ["--failures", str(failures)]
    if as_json:
        argv.append("--json")
    if keep is not None:
        argv += ["--state-dir", str(keep)]
    # its own process: the reconciler never imports the agent or vastsim, and this runs both
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.stdout:
        typer.echo(done.stdout, nl=False)
    if done.stderr:
        typer.echo(done.stderr, err=True, nl=False)
    raise typer.Exit(0 if done.returncode == 0 else 1)


PinTarget = Annotated[
    str,
    typer.Argument(
        metavar="INSTANCE|RECORD",
        help="A vast instance id (digits, e.g. 20000001) or a record id (e.g. i12).",
    ),
]
_PIN_LOCK_NOTE = (
    "pin and unpin change only the state, never vast. While `ray-vast watch` (or `up`) runs it "
    "holds the state lock: the order is handed to it, and it takes it within a second."
)


def _who(env: dict[str, str]) -> str:
    """`$USER@host`: who a pin is recorded for (the lock's user, when $USER is not set)."""
    user = env.get("USER") or Identity.current().who.partition("@")[0]
    return f"{user}@{socket.gethostname()}"


@app.command(
    epilog=(
        "Examples:\n\n"
        "  ray-vast pin 20000001 --for 2h\n\n"
        "  ray-vast pin i12 --reason 'eval run, ask alice'\n\n"
        "  ray-vast pin i12 --for 30m  # pinned already: the new pin replaces it\n\n"
        + _PIN_LOCK_NOTE
    )
)
def pin(
    target: PinTarget,
    for_: Annotated[
        str | None,
        typer.Option("--for", help="How long: 90s, 30m, 2h, 1d. Default: until `unpin`."),
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, kept with the pin and in the ledger.")
    ] = None,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """Hold a machine: no watchdog, money-chain step or scale-down stops or destroys it.

    The pin lasts until --for runs out or `ray-vast unpin`. Vast is not called.
    """
    deps = _deps(state_dir, lock_timeout)
    with _reported(deps):
        seconds = operations.parse_duration(for_) if for_ is not None else None
        order = PinOrder(target, _who(dict(deps.env)), reason, seconds)
        code = operations.pin(deps, order)
    raise typer.Exit(code)


@app.command(
    epilog=("Examples:\n\n  ray-vast unpin 20000001\n\n  ray-vast unpin i12\n\n" + _PIN_LOCK_NOTE)
)
def unpin(
    target: PinTarget,
    state_dir: StateDirOption = None,
    lock_timeout: LockTimeout = 0.0,
) -> None:
    """End a person's pin; the watchdogs and the money chain may end the machine again.

    Ray's own hold (work on the node) is not a pin and stays while the work runs.
    """
    deps = _deps(state_dir, lock_timeout)
    with _reported(deps):
        order = PinOrder(target, _who(dict(deps.env)), unpin=True)
        code = operations.pin(deps, order)
    raise typer.Exit(code)


state_app = typer.Typer(help="Inspect the state file and its lock.", no_args_is_help=True)
app.add_typer(state_app, name="state")


@state_app.command(
    "list", epilog="Examples:\n\n  ray-vast state list\n\n  ray-vast state list --json"
)
def state_list(state_dir: StateDirOption = None, as_json: JsonFlag = False) -> None:
    """One line per record: id, cluster, kind, phase."""
    deps = _deps(state_dir)
    with _reported(deps):
        records, lineage, serial = deps.read_records()
    rows = [
        {"id": r.id, "cluster": r.cluster, "vast_id": r.vast_id, "phase": r.phase.value}
        for r in sorted(records.instances.values(), key=lambda r: r.id)
    ]
    if as_json:
        typer.echo(json.dumps({"lineage": lineage, "serial": serial, "instances": rows}, indent=2))
        return
    typer.echo(f"lineage {lineage} serial {serial}")
    for row in rows:
        typer.echo(f"instance.{row['id']}  {row['cluster']}  vast {row['vast_id']}  {row['phase']}")


@state_app.command("show", epilog="Examples:\n\n  ray-vast state show i12")
def state_show(
    record: Annotated[str, typer.Argument(help="A record id, as `state list` prints it.")],
    state_dir: StateDirOption = None,
) -> None:
    """Every field of one record, as JSON."""
    deps = _deps(state_dir)
    with _reported(deps):
        records, _, _ = deps.read_records()
    found = records.instances.get(record.removeprefix("instance.")) or records.requests.get(record)
    if found is None:
        typer.echo(f"Error: no record {record!r} in the state", err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(encode(found), indent=2))


@state_app.command(
    "force-unlock", epilog="Examples:\n\n  ray-vast state force-unlock 3f2a...  # the lock ID"
)
def state_force_unlock(
    lock_id: Annotated[str, typer.Argument(help="The lock ID printed by the refused command.")],
    state_dir: StateDirOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            "-force",
            help="Accepted for Terraform's spelling; force-unlock never asks (the ID is the "
            "confirmation).",
        ),
    ] = False,
) -> None:
    """Remove a lock left by a process that died. Never remove a live one."""
    del force  # nothing to skip: the exact lock ID is the confirmation
    deps = _deps(state_dir)
    with _reported(deps):
        holder = deps.store().force_unlock(lock_id)
    typer.echo(f"Lock {lock_id} removed (was held by {holder.info.who}, pid {holder.info.pid}).")


def main() -> None:
    """Console-script entry point."""
    app()
