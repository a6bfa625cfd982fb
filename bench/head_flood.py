"""What a flood of strangers costs a worker's heartbeats (issue 13, the transport half).

How to run (from the repository root, in a network namespace of its own: loopback only)::

    unshare -n -- sh -c 'ip link set lo up && exec .venv/bin/python bench/head_flood.py'

A real head service on loopback, built as the tests build it (`tests/head/harness.head_world`:
a served vastsim, the head's two TLS ports, the real ledger on disk), and one enrolled worker
that heartbeats over mutual TLS in a loop (a new connection each time, as the agent does, one
every `--pace` seconds). The worker's heartbeat latency (connect, handshake, request, answer) is
measured in three phases:

(a) alone;
(b) while `--junk` POSTs hit `/enroll` and `/report` in a burst from another loopback address
    (127.0.0.99), sent by a child process (so the strangers' own TLS work does not share the
    head's interpreter lock): malformed JSON, a wrong schema, valid-looking enrollments with
    made-up tokens naming the worker's or other instance ids, reports with made-up tokens;
(c) while `--idle` TCP connections are held open to the two ports (half each) from 25 loopback
    addresses per port, never sending a byte; what the head cuts (its handshake deadline) is
    opened again at once, as an attacker would, for `--hold` seconds.

Printed: latency p50/p99/max per phase; for the flood, the junk requests' outcomes (answered by
status, or closed without an answer: refused by a cap at accept), the ledger lines it added (by
class), and the head's transport refusals; for the idle phase, the connections held and refused.
The issue's targets, for reading (nothing is asserted): <= 50 ledger lines for 1,500 junk posts,
heartbeat p99 <= 200 ms during the flood, every heartbeat answered within 2 s while 1,000
connections idle.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import logging
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/head_flood.py`: the root holds `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.head import pki, tls
from tests.head.harness import HeadWorld, client_pair, head_world, heartbeat_body

STRANGER = "127.0.0.99"
HOST = "127.0.0.1"


# --- the worker ------------------------------------------------------------------------------


@dataclass
class Sample:
    started: float
    seconds: float
    status: int  # 0: no answer


@dataclass
class Worker:
    """The enrolled worker's heartbeat loop, each one timed."""

    world: HeadWorld
    answer: dict[str, Any]
    client: pki.Issued
    pace: float
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bench-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        context = tls.client_context(self.world.pki.ca_pem, client=self.client)
        port = self.world.service.endpoints.heartbeat_port
        seq = 1
        while not self._stop.is_set():
            seq += 1
            body = json.dumps(heartbeat_body(self.answer, seq=seq)).encode()
            started = time.monotonic()
            status = 0
            conn = http.client.HTTPSConnection(HOST, port, context=context, timeout=10)
            try:
                conn.request("POST", "/heartbeat", body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                status = reply.status
            except OSError:
                status = 0
            finally:
                conn.close()
            self.samples.append(Sample(started, time.monotonic() - started, status))
            self._stop.wait(self.pace)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in list(self.samples) if start <= s.started < end]


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_line(name: str, samples: Sequence[Sample]) -> str:
    ms = [s.seconds * 1000 for s in samples]
    failed = sum(s.status != 200 for s in samples)
    return (
        f"  {name:<34} n={len(ms):4d}  p50={percentile(ms, 0.5):7.1f} ms  "
        f"p99={percentile(ms, 0.99):7.1f} ms  max={max(ms, default=float('nan')):7.1f} ms  "
        f"not 200: {failed}"
    )


# --- (b) the junk, from a child process -------------------------------------------------------


def junk_bodies(count: int, instance_id: int) -> Iterator[tuple[str, bytes]]:
    """Malformed, mis-shaped and forged posts, in turn."""
    for i in range(count):
        kind = i % 5
        token = f"made-up-{i:06d}-{'x' * 24}"
        victim = instance_id if i % 2 else 10_000 + i
        if kind == 0:
            yield "/enroll", b'{"protocol": 1, "token": '  # cut short
        elif kind == 1:
            yield "/report", json.dumps({"hello": "world", "n": i}).encode()
        elif kind in {2, 3}:
            doc = {
                "protocol": 1,
                "token": token,
                "instance_id": victim,
                "boot_id": f"{i:08x}",
                "public_ip": "203.0.113.7",
                "ports": {},
                "machine": {"cpus": 8, "cpu_source": "forged", "gpus": 0},
            }
            yield "/enroll", json.dumps(doc).encode()
        else:
            doc = {
                "protocol": 1,
                "token": token,
                "instance_id": victim,
                "boot_id": f"{i:08x}",
                "record_id": None,
                "phase": "worker",
                "reason": "ray_exited",
                "detail": "forged",
                "at": time.time(),
            }
            yield "/report", json.dumps(doc).encode()


def junk_main(args: argparse.Namespace) -> None:
    """The child: `args.junk` posts from `STRANGER` over `args.threads` threads, as fast as they
    go; prints its outcomes as one JSON line."""
    context = tls.client_context(Path(args.ca).read_text())
    work = list(junk_bodies(args.junk, args.instance))
    lock = threading.Lock()
    outcomes: Counter[str] = Counter()
    next_index = [0]

    def sender() -> None:
        while True:
            with lock:
                if next_index[0] >= len(work):
                    return
                path, body = work[next_index[0]]
                next_index[0] += 1
            conn = http.client.HTTPSConnection(
                HOST, args.port, context=context, timeout=10, source_address=(STRANGER, 0)
            )
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                reply = conn.getresponse()
                reply.read()
                outcome = str(reply.status)
            except OSError:
                outcome = "closed"
            finally:
                conn.close()
            with lock:
                outcomes[outcome] += 1

    print("go", flush=True)
    started = time.monotonic()
    threads = [threading.Thread(target=sender) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"outcomes": outcomes, "seconds": time.monotonic() - started}), flush=True)


@dataclass
class Flood:
    outcomes: dict[str, int]
    seconds: float
    start: float
    end: float


def flood(world: HeadWorld, instance_id: int, *, junk: int, threads: int, tmp: Path) -> Flood:
    ca = tmp / "ca.pem"
    ca.write_text(world.pki.ca_pem)
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--as-junk-sender",
        f"--port={world.service.endpoints.enroll_port}",
        f"--ca={ca}",
        f"--instance={instance_id}",
        f"--junk={junk}",
        f"--threads={threads}",
    ]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        child.stdout.readline()  # "go"
        start = time.monotonic()
        result = json.loads(child.stdout.readline())
        end = time.monotonic()
        child.wait(timeout=30)
    return Flood(result["outcomes"], result["seconds"], start, end)


# --- (c) idle connections ---------------------------------------------------------------------


@dataclass
class Idle:
    held_at_most: dict[str, int]
    reopened: int
    closed_at_once: int


def caps(world: HeadWorld) -> int:
    return sum(v for (_, r), v in world.service.refusals().items() if r.endswith("_cap"))


def hold_idle(world: HeadWorld, count: int, seconds: float) -> Idle:
    """`count` TCP connections (half per port, 25 addresses each), none sending a byte, for
    `seconds`; each one the head ends is opened again."""
    ports = {
        "enrollment": world.service.endpoints.enroll_port,
        "heartbeat": world.service.endpoints.heartbeat_port,
    }
    slots: list[tuple[str, str]] = []
    for n, name in enumerate(ports):
        for i in range(count // 2):
            slots.append((name, f"127.0.{10 + n}.{1 + i % 25}"))
    selector = selectors.DefaultSelector()
    held: dict[socket.socket, tuple[str, str]] = {}
    reopened = 0
    closed_at_once = 0
    most: Counter[str] = Counter()
    caps_before = caps(world)

    def open_one(slot: tuple[str, str]) -> None:
        name, source = slot
        sock = socket.create_connection((HOST, ports[name]), timeout=5, source_address=(source, 0))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        held[sock] = slot

    def close_one(sock: socket.socket) -> tuple[str, str]:
        selector.unregister(sock)
        sock.close()
        return held.pop(sock)

    try:
        for slot in slots:
            open_one(slot)
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            for key, _ in selector.select(timeout=min(left, 0.2)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                open_one(close_one(sock))
                reopened += 1
            for name, value in world.service.open_connections().items():
                most[name] = max(most[name], value)
        closed_at_once = caps(world) - caps_before
    finally:
        for sock in list(held):
            close_one(sock)
        selector.close()
    return Idle(dict(most), reopened, closed_at_once)


# --- the run ----------------------------------------------------------------------------------


class LogCount(logging.Handler):
    """The head's log lines, counted by level (and not printed)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.levels: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.levels[record.levelname] += 1


def raise_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def settled(read: Any, *, quiet: float = 0.5, limit: float = 10.0) -> Any:
    """Read `read()` until it has not changed for `quiet` seconds (at most `limit`)."""
    value, since = read(), time.monotonic()
    end = since + limit
    while time.monotonic() < end:
        time.sleep(0.05)
        again = read()
        if again != value:
            value, since = again, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return value


def run(args: argparse.Namespace) -> None:
    files = raise_file_limit()
    head_log = LogCount()
    logger = logging.getLogger("reconciler")
    logger.addHandler(head_log)
    logger.setLevel(logging.INFO)
    print(
        f"head_flood: one worker heartbeating over mutual TLS every {args.pace}s"
        f" (open files {files})"
    )
    with (
        tempfile.TemporaryDirectory(prefix="rv-flood-") as directory,
        head_world(Path(directory)) as world,
    ):
        tmp = Path(directory)
        rented = world.rent(world.place(slots=1))
        enrolled = world.enroll(rented)
        assert enrolled.status == 200, enrolled.doc
        worker = Worker(world, enrolled.doc, client_pair(enrolled.doc), pace=args.pace)
        worker.start()
        try:
            start = time.monotonic()
            time.sleep(args.alone)
            alone = worker.between(start, time.monotonic())

            lines_before = len(world.ledger())
            logged_before = Counter(head_log.levels)
            refusals_before = Counter(world.service.refusals())
            burst = flood(world, rented.vast_id, junk=args.junk, threads=args.threads, tmp=tmp)
            during = worker.between(burst.start, burst.end)
            lines = settled(lambda: len(world.ledger())) - lines_before
            added = Counter(e.class_ for e in world.ledger()[lines_before:])
            refused = Counter(world.service.refusals())
            refused.subtract(refusals_before)
            logged = Counter(head_log.levels)
            logged.subtract(logged_before)

            start = time.monotonic()
            idle = hold_idle(world, args.idle, args.hold)
            held = worker.between(start, time.monotonic())
        finally:
            worker.stop()

    print("heartbeat latency (connect + handshake + request + answer):")
    print(latency_line("(a) alone", alone))
    print(latency_line(f"(b) during {args.junk} junk posts", during))
    print(latency_line(f"(c) while {args.idle} connections idle", held))
    print(
        f"(b) the flood: {args.junk} posts over {args.threads} connections at once from "
        f"{STRANGER}, {burst.seconds:.1f}s"
    )
    outcomes = dict(sorted(burst.outcomes.items()))
    answered_4xx = sum(v for k, v in outcomes.items() if k.isdigit() and 400 <= int(k) < 500)
    print(f"    outcomes: {outcomes}")
    print(
        f"    refused (4xx/429): {answered_4xx}, closed at once (caps): "
        f"{outcomes.get('closed', 0)}, answered otherwise: "
        f"{args.junk - answered_4xx - outcomes.get('closed', 0)}"
    )
    print(f"    ledger lines added: {lines} {dict(added)}")
    print(f"    transport refusals: {dict(+refused)}")
    print(f"    head log lines (INFO and up): {dict(+logged)}")
    print(
        f"(c) idle: held at most {idle.held_at_most}, opened again after a cut: "
        f"{idle.reopened}, closed at once by a cap: {idle.closed_at_once}"
    )
    print(f"    heartbeats over 2 s while idle: {sum(s.seconds > 2 for s in held)}")


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pace", type=float, default=0.02, help="seconds between heartbeats")
    parser.add_argument("--alone", type=float, default=3.0, help="seconds of phase (a)")
    parser.add_argument("--junk", type=int, default=1500, help="junk posts in phase (b)")
    parser.add_argument("--threads", type=int, default=48, help="junk connections at once")
    parser.add_argument("--idle", type=int, default=1000, help="idle connections in phase (c)")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds of phase (c)")
    parser.add_argument("--as-junk-sender", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", help=argparse.SUPPRESS)
    parser.add_argument("--instance", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.as_junk_sender:
        junk_main(args)
    else:
        run(args)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main(sys.argv[1:])
