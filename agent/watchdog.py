"""The agent as PID 1: the real world's driver of the agent's decisions (`agent.lifecycle`).

Every decision (when to enroll again, when a worker gives up, which endings there are, report
first, destroy until vast confirms, never exit) is the machine's, so the virtual-time harness
(`fleetsim.agents`) holds the very same decisions to the seed's table. This module only connects the
machine to the real world, and adds nothing of its own:

    the clock     `time.monotonic()` is the machine's `now`; `time.time()` only stamps messages
    the head      enrollment, heartbeats and the report over pinned TLS (`agent.transport`),
                  from the container's own address when told one (`Settings.source_ip`); the
                  resume of a saved identity with its certificate (mutual TLS, port B)
    the disk      the identity a deliberate stop keeps, found at boot (`agent.identity`)
    vast          the self-destroy with the instance's own key (`agent.ending`)
    PID 1         exits only when the machine says so (`Exit`, after a deliberate stop kept
                  the identity): the container stops with vast's stop, its disk kept
    Ray           `ray start --block` in its own process group (`agent.raynode`), polled
    signals       TERM, INT and HUP become `Signalled`; QUIT, USR1 and USR2 are ignored

    events (deque) --> lifecycle.step --> commands, executed in order --> their answers, queued
         ^                                                                    |
         +-- Ray polled, signals taken, Tick when the last WakeAt is due <----+

Signals and blocking requests. The handler queues the signal. A request to a head that drops
packets blocks up to its timeout (10 s), which would hold TERM's answer that long; so while a
request of a live phase (candidate, worker) is in flight the handler also raises `Interrupted`,
which unwinds that request (a BaseException, so no `except Exception` on the way swallows it),
and the driver feeds the request's failure, then the signal. Once the machine is ending, signals
are only queued (the machine logs and ignores them): the report and the destroy are never cut
short. KILL cannot be caught, and inside a container it cannot reach PID 1 either.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from agent import (
    cores,
    ending,
    identity,
    lifecycle,
    messages,
    raynode,
    rayversion,
    sampling,
    transport,
)
from agent.commands import (
    Command,
    DestroySelf,
    Exit,
    ForgetIdentity,
    Log,
    SaveIdentity,
    SendEnroll,
    SendHeartbeat,
    SendReport,
    SendResume,
    StartRay,
    StopRay,
    WakeAt,
)
from agent.config import Settings
from agent.events import (
    BootstrapError,
    DestroyAnswered,
    EnrollAnswered,
    EnrollFailed,
    Event,
    HeartbeatAnswered,
    HeartbeatFailed,
    IdentitySaved,
    RayExited,
    ReportDone,
    ResumeAnswered,
    ResumeFailed,
    Signalled,
    Started,
    Tick,
)
from agent.state import LIVE_PHASES, Timings, initial

PROTOCOL = messages.PROTOCOL
LOOP_SECONDS = 0.2  # how often Ray is polled and signals are taken while nothing is due
IGNORED_SIGNALS = (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal cut a blocking request of a live phase short."""


@dataclass(frozen=True)
class Boot:
    """This start of the container's PID 1: when (monotonic) and a random id for the head."""

    started: float
    boot_id: str


class Watchdog:
    """Runs `agent.lifecycle` on the real clock until the instance is gone (it never returns)."""

    def __init__(
        self,
        settings: Settings,
        boot: Boot,
        *,
        env: Mapping[str, str],
        log: Callable[[str], None],
        sampler: sampling.Sampler | None = None,
    ) -> None:
        self.settings = settings
        self.boot = boot
        self.env = env
        self.log = log
        self.sampler = sampler or sampling.Sampler(count_network=sampling.counts_network(env))
        self.state = initial(
            Timings.of(settings), started=boot.started, record_id=settings.record_id
        )
        self.events: deque[Event] = deque()
        self.wake: float | None = None
        self.ray: raynode.RayProcess | None = None
        self._ray_done = False
        self._signals: list[str] = []
        self._interruptible = False
        self._cpu_source = ""
        self._runtime: dict[str, Any] | None = None
        self._head_context: Any = None
        self._heartbeat_context: Any = None
        self._heartbeat_url = ""
        self._worker_ports: list[int] = []
        self._node_manager = 0
        self._pid_one = os.getpid() == 1

    @property
    def phase(self) -> str:
        return self.state.phase

    # --- the whole life --------------------------------------------------------------------

    def run(self) -> NoReturn:
        """Count the machine, then enroll (or resume a saved identity), serve and end as the
        machine decides."""
        self.arm_signals()
        try:
            saved, found = identity.load(self.env, self.settings.instance_id)
            self.log(found)
            self.state = initial(
                self.state.timings,
                started=self.boot.started,
                record_id=self.settings.record_id,
                saved=saved,
            )
        except Exception as exc:  # a disk that cannot be read: enroll, as a first boot does
            self.log(f"the saved identity could not be read: {_exception(exc)}")
        try:
            machine = cores.read_cores()
            gpus = cores.detect_gpus(self.env)
            self.log(f"{machine.cores} CPUs ({machine.source}), {gpus.gpus} GPUs ({gpus.source})")
            self._cpu_source = machine.source
            self.events.append(Started(machine.cores, gpus.gpus))
        except Exception as exc:
            self.events.append(BootstrapError(_exception(exc)))
        self.drive()

    def run_unconfigured(self, problem: str) -> NoReturn:
        """The environment lacks the head's settings: an error in the bootstrap with nobody to
        report to; the machine still ends it (the destroy needs vast's own variables only)."""
        self.arm_signals()
        self.events.append(BootstrapError(problem))
        self.drive()

    def drive(self) -> NoReturn:
        while True:
            try:
                self._turn()
            except Exception as exc:  # the driver's own failure is an error in the bootstrap
                self.events.append(BootstrapError(_exception(exc)))
                time.sleep(LOOP_SECONDS)  # one that recurs must not spin

    def arm_signals(self) -> None:
        def on_signal(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            self._signals.append(name)
            if self._interruptible:
                self._interruptible = False
                raise Interrupted(name)

        for sig in ENDING_SIGNALS:
            signal.signal(sig, on_signal)
        for sig in IGNORED_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def _turn(self) -> None:
        """One event through the machine, or a tick when one is due, or a short wait."""
        while self._signals:
            self.events.append(Signalled(self._signals.pop(0)))
        self._watch_ray()
        if self.events:
            self._feed(self.events.popleft())
            return
        now = time.monotonic()
        if self.wake is not None and now >= self.wake:
            self._feed(Tick())
            return
        pause = LOOP_SECONDS if self.wake is None else min(LOOP_SECONDS, self.wake - now)
        time.sleep(max(0.0, pause))

    def _feed(self, event: Event) -> None:
        self.state, commands = lifecycle.step(self.state, event, time.monotonic())
        self.wake = None
        for command in commands:
            self._execute(command)

    def _watch_ray(self) -> None:
        ray = self.ray
        if ray is None:
            return
        if not self._ray_done:
            code = ray.poll()
            if code is not None:
                self._ray_done = True
                self.events.append(RayExited(code))
        if self._pid_one:
            raynode.reap_orphans(keep=ray.pid)

    # --- the machine's commands ----------------------------------------------------------------

    def _execute(self, command: Command) -> None:
        if isinstance(command, Log):
            self.log(command.message)
        elif isinstance(command, WakeAt):
            self.wake = command.at
        elif isinstance(command, SendEnroll):
            self.events.append(self._enroll(command))
        elif isinstance(command, SendResume):
            self.events.append(self._resume(command))
        elif isinstance(command, StartRay):
            self._start_ray(command)
        elif isinstance(command, SendHeartbeat):
            self.events.append(self._heartbeat(command))
        elif isinstance(command, SendReport):
            self.events.append(self._report(command))
        else:
            self._execute_ending(command)

    def _execute_ending(self, command: Command) -> None:
        """The commands of the endings: Ray stopped, the identity kept or forgotten, the
        self-destroy, PID 1's exit."""
        if isinstance(command, StopRay):
            self._stop_ray(command.grace)
        elif isinstance(command, DestroySelf):
            confirmed, what = ending.destroy_once(self.settings, timeout=command.timeout)
            self.events.append(DestroyAnswered(confirmed, what))
        elif isinstance(command, SaveIdentity):
            self.events.append(self._save_identity(command))
        elif isinstance(command, ForgetIdentity):
            try:
                identity.forget(self.env)
            except OSError as exc:  # the head has taken the resume: a leftover is refused later
                self.log(f"the saved identity could not be removed: {exc}")
        elif isinstance(command, Exit):
            self._exit(command.code)
        else:
            raise TypeError(f"not an agent command: {command!r}")

    def _enroll(self, command: SendEnroll) -> Event:
        body = messages.enroll_body(
            self.settings,
            boot_id=self.boot.boot_id,
            cpus=self.state.cpus,
            cpu_source=self._cpu_source,
            gpus=self.state.gpus,
            runtime=self._ray_runtime(),
        )
        reply = self._exchange(
            f"{self.settings.enroll_url}/enroll",
            body=body,
            context=self._head(),
            timeout=command.timeout,
        )
        if isinstance(reply, str):
            return EnrollFailed(reply)
        return EnrollAnswered(reply.status, reply.doc)

    def _resume(self, command: SendResume) -> Event:
        saved = self.state.saved or {}
        cert = saved["certificate"]
        body = messages.resume_body(
            self.settings,
            record_id=self.state.record_id,
            boot_id=self.boot.boot_id,
            cpus=self.state.cpus,
            cpu_source=self._cpu_source,
            gpus=self.state.gpus,
            runtime=self._ray_runtime(),
        )
        try:
            context = transport.pinned_context(
                cert["ca_pem"], cert_pem=cert["cert_pem"], key_pem=cert["key_pem"]
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            return ResumeFailed(f"the saved certificate cannot be used: {exc}")
        reply = self._exchange(
            messages.resume_url(str(saved["heartbeat"]["url"])),
            body=body,
            context=context,
            timeout=command.timeout,
        )
        if isinstance(reply, str):
            return ResumeFailed(reply)
        return ResumeAnswered(reply.status, reply.doc)

    def _save_identity(self, command: SaveIdentity) -> Event:
        try:
            identity.save(self.env, self.settings.instance_id, command.identity)
        except OSError as exc:
            return IdentitySaved(False, str(exc))
        self.log(f"identity kept at {identity.path(self.env)}")
        return IdentitySaved(True)

    def _exit(self, code: int) -> NoReturn:
        """PID 1 ends: the container stops (vast is stopping it) and keeps its disk. `os._exit`,
        so that nothing on the way (the bootloader's own endings) turns it into a destroy."""
        self.log(f"PID 1 exits ({code}) without destroying: the disk is kept")
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    def _ray_runtime(self) -> dict[str, Any]:
        """The image's Ray and Python (asked once, before the first enrollment attempt)."""
        if self._runtime is None:
            self._runtime = rayversion.probe(self.settings.ray_command, self.env)
            found = self._runtime
            self.log(
                f"Ray {found['ray_version'] or 'unknown'} on Python "
                f"{found['python_version'] or 'unknown'} ({found.get('source', '')})"
            )
        return self._runtime

    def _start_ray(self, command: StartRay) -> None:
        answer = command.answer
        ray = answer["ray"]
        cert = answer["certificate"]
        self._heartbeat_context = transport.pinned_context(
            cert["ca_pem"], cert_pem=cert["cert_pem"], key_pem=cert["key_pem"]
        )
        self._heartbeat_url = str(answer["heartbeat"]["url"])
        self._worker_ports = [int(p) for p in ray["worker_ports"]]
        self._node_manager = int(ray["node_manager_port"])
        plan = raynode.ray_plan(
            self.settings.ray_command,
            ray,
            cpus=command.cpus,
            gpus=command.gpus,
            token_path=raynode.write_token(str(ray["auth_token"])),
            base_env=self.env,
            node_ip=self.settings.source_ip,
            agent_ports=raynode.free_ports(4),
            python=(self._runtime or {}).get("python"),
        )
        self.log("starting Ray: " + raynode.shown(plan.argv))
        try:
            self.ray = raynode.RayProcess(plan)
        except OSError as exc:
            self.events.append(BootstrapError(f"cannot start Ray ({plan.argv[0]}): {exc}"))

    def _heartbeat(self, command: SendHeartbeat) -> Event:
        ray = self.ray
        if ray is None:
            return HeartbeatFailed("Ray was not started")
        pids, limit = self.sampler.processes()
        body = messages.heartbeat_body(
            self.settings,
            record_id=self.state.record_id,
            boot_id=self.boot.boot_id,
            seq=command.seq,
            sent_at=time.time(),
            ray={
                "state": "running" if self.sampler.listening(self._node_manager) else "starting",
                "pid": ray.pid,
                "exit_code": None,
                "uptime_seconds": round(ray.uptime(), 3),
            },
            processes={"pids": pids, "pids_limit": limit, "ray_processes": group_size(ray.pid)},
            worker_ports={
                "in_use": self.sampler.ports_in_use(self._worker_ports),
                "total": len(self._worker_ports),
            },
            utilisation=self.sampler.utilisation(),
            stop_acknowledged=command.stop_acknowledged,
        )
        reply = self._exchange(
            self._heartbeat_url,
            body=body,
            context=self._heartbeat_context,
            timeout=command.timeout,
        )
        if isinstance(reply, str):
            return HeartbeatFailed(reply)
        return HeartbeatAnswered(reply.status, reply.doc)

    def _report(self, command: SendReport) -> Event:
        if not self.settings.head_address:
            return ReportDone(None, error="no head to report to")
        body = messages.report_body(
            self.settings, boot_id=self.boot.boot_id, report=command.report, at=time.time()
        )
        reply = self._exchange(
            f"{self.settings.enroll_url}/report",
            body=body,
            context=self._head(),
            timeout=command.timeout,
        )
        if isinstance(reply, str):
            return ReportDone(None, error=reply)
        return ReportDone(reply.status, reply.doc)

    def _stop_ray(self, grace: float) -> None:
        ray = self.ray
        if ray is None:
            return
        self.log(f"stopping Ray (process group {ray.pid})")
        self._ray_done = True  # its exit is the ending's own doing now
        try:
            ray.stop(grace)
        except Exception as exc:  # the destroy must happen whatever Ray did
            self.log(f"stopping Ray failed: {exc!r}")

    # --- the network -----------------------------------------------------------------------

    def _head(self) -> Any:
        if self._head_context is None:
            self._head_context = transport.pinned_context(self.settings.ca_pem)
        return self._head_context

    def _exchange(
        self, url: str, *, body: dict[str, Any], context: Any, timeout: float
    ) -> transport.Reply | str:
        """One POST: the reply, or why there was none (no answer, or a signal cut it short)."""
        self._interruptible = self.state.phase in LIVE_PHASES
        try:
            try:
                if self._interruptible and self._signals:
                    raise Interrupted(self._signals[0])
                return transport.request(
                    url,
                    method="POST",
                    body=body,
                    context=context,
                    timeout=timeout,
                    source=self.settings.source_ip,
                )
            finally:
                self._interruptible = False
        except Interrupted as why:
            return f"interrupted by {why}"
        except transport.TransportError as exc:
            return str(exc)


def _exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def group_size(pgid: int) -> int:
    """Live processes in a process group, from /proc."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != "Z" and fields[2] == str(pgid):
            count += 1
    return count
