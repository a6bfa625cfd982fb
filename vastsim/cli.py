"""`python -m vastsim serve`: a local vast.ai on a port, until SIGTERM or SIGINT.

It prints one line, `vastsim listening on http://HOST:PORT`, once the socket is ready (so a test or
a script can wait for it), and on SIGTERM/SIGINT destroys every instance and kills every container
process before it exits.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from types import FrameType

from vastsim.clock import RealClock
from vastsim.containers.protocol import Runner
from vastsim.containers.runner import ProcessRunner
from vastsim.containers.scripted import ScriptedRunner
from vastsim.generate import generate_market
from vastsim.lifecycle import Timing
from vastsim.market import Market
from vastsim.server import serve
from vastsim.sim import Sim


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m vastsim", description=__doc__)
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="serve the simulated vast.ai API")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=0, help="0 picks a free port")
    run.add_argument("--api-key", required=True, help="the account key clients must present")
    run.add_argument("--admin-key", default=None, help="enables the /_sim control API")
    run.add_argument("--market", default=None, help="market YAML file (default: the built-in)")
    run.add_argument("--generate", type=int, default=None, metavar="N", help="N random machines")
    run.add_argument("--seed", type=int, default=1, help="seed for --generate")
    run.add_argument("--runner", choices=("scripted", "process"), default="scripted")
    run.add_argument("--workdir", default=None, help="process runner directory (default: temp)")
    run.add_argument(
        "--loopback-ips",
        action="store_true",
        help="scripted runner: each instance its own 127.a.b.c (the process runner always does)",
    )
    run.add_argument("--timing", choices=("vast", "fast", "instant"), default="vast")
    run.add_argument("--auth-status", type=int, choices=(401, 404), default=401)
    run.add_argument("--rate-limits", action="store_true", help="vast's per-endpoint intervals")
    return top


def build_market(args: argparse.Namespace) -> Market:
    if args.market:
        return Market.from_yaml(args.market)
    if args.generate:
        return generate_market(seed=args.seed, machines=args.generate)
    return Market.default()


def build_timing(name: str) -> Timing:
    return {"vast": Timing(), "fast": Timing.fast(), "instant": Timing.instant()}[name]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with tempfile.TemporaryDirectory(prefix="vastsim-") as scratch:
        runner: Runner = (
            ProcessRunner(args.workdir or scratch)
            if args.runner == "process"
            else ScriptedRunner(loopback_ips=args.loopback_ips)
        )
        sim = Sim(
            market=build_market(args),
            clock=RealClock(),
            api_key=args.api_key,
            admin_key=args.admin_key,
            runner=runner,
            timing=build_timing(args.timing),
            auth_error_status=args.auth_status,
            rate_limits=args.rate_limits,
        )
        with serve(sim, args.host, args.port) as server:
            sys.stdout.write(f"vastsim listening on {server.url}\n")
            sys.stdout.flush()
            while not stop.wait(0.5):
                pass
    return 0
