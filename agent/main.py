"""The agent's entry points: `run` (what the bootloader calls, as PID 1) and a small command line.

    python3 -m agent.main --help
    python3 -m agent.main --self-check     what the agent would see here (cores, GPUs, settings)
    python3 -m agent.main run              run as the container's PID 1 (normally the bootloader
                                           downloads the agent and calls `run` itself)

`run` never returns: every way out is a report and a self-destroy (`lifecycle` decides,
`watchdog` carries it out).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from agent import cores, ending
from agent.config import ConfigError, Settings, vast_url
from agent.watchdog import Boot, Watchdog

USAGE = __doc__ or ""


def log(message: str) -> None:
    """A line of the container's log (vast keeps it only while the instance exists)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    sys.stdout.write(f"[rv-agent {stamp}] {message}\n")
    sys.stdout.flush()


def run(boot: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> NoReturn:
    """Be the container's PID 1 until the instance is gone."""
    env = dict(os.environ if env is None else env)
    given = dict(boot or {})
    this_boot = Boot(
        started=float(given.get("started", time.monotonic())),
        boot_id=str(given.get("boot_id") or secrets.token_hex(8)),
    )
    python = sys.version.split()[0]
    log(f"agent from {__file__} on Python {python} (boot {this_boot.boot_id}, pid {os.getpid()})")
    try:
        settings = Settings.from_env(env)
    except ConfigError as exc:
        unconfigured(env, str(exc), this_boot)
    Watchdog(settings, this_boot, env=env, log=log).run()


def unconfigured(env: Mapping[str, str], problem: str, boot: Boot) -> NoReturn:
    """Without the head's settings there is nobody to report to: the machine ends the boot as an
    error in the bootstrap (its report fails at once) and destroys through vast's own variables
    when they allow it; else it waits (a PID 1 that exits would be restarted and keep billing)."""
    log(f"error in the bootstrap: {problem}")
    if env.get("CONTAINER_ID", "").isdigit() and env.get("CONTAINER_API_KEY"):
        minimal = Settings(
            instance_id=int(env["CONTAINER_ID"]),
            instance_key=env["CONTAINER_API_KEY"],
            join_token="",
            head_address="",
            enroll_port=0,
            ca_pem="",
            vast_url=vast_url(env),
            report_wait=0.0,
        )
        Watchdog(minimal, boot, env=env, log=log).run_unconfigured(problem)
    ending.disarm_signals(log)
    while True:
        time.sleep(3600)


def self_check(env: Mapping[str, str]) -> dict[str, Any]:
    """What the agent sees on this machine, without changing anything."""
    machine = cores.read_cores()
    gpus = cores.detect_gpus(env)
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "agent": __file__,
        "cpus": machine.cores,
        "cpu_source": machine.source,
        "gpus": gpus.gpus,
        "gpu_source": gpus.source,
    }
    try:
        settings = Settings.from_env(env)
    except ConfigError as exc:
        report["settings"] = f"incomplete: {exc}"
    else:
        report["settings"] = "complete"
        report["head"] = settings.enroll_url
        report["ray_command"] = list(settings.ray_command)
    return report


def cli(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE.strip() + "\n")
        return 0
    if argv[0] == "--self-check":
        sys.stdout.write(json.dumps(self_check(os.environ), indent=2, sort_keys=True) + "\n")
        return 0
    if argv[0] == "run":
        run()
    sys.stderr.write(f"unknown command {argv[0]!r}\n\n{USAGE.strip()}\n")
    return 2


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
