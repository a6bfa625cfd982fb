"""The agents of a virtual-time fleet: the real agent's decisions, run inside vastsim's containers.

Nothing here decides anything an agent decides. Each boot of a container whose create request
runs our bootloader gets an `AgentBehaviour` (a `vastsim.Behaviour`) that drives
`agent.lifecycle.step` on the simulator's clock, exactly as `agent.watchdog` drives it on the real
one, and carries out its commands against the real counterparts, in-process:

    SendEnroll / SendResume / SendHeartbeat   the cluster's `HeadApp` (bytes in, `Answer` out):
    / SendReport                              the real schemas, decisions, records lock, ledger;
                                              the heartbeat (and a resume) presents the DER of
                                              the certificate the enrollment answer issued; each
                                              call names the container's address (its boot's
                                              `PUBLIC_IPADDR`) as the peer the head sees
    StartRay / StopRay                        a simulated Ray node (`agent.raynode.ray_plan` still
                                              reads the answer's Ray section); an idle drain
                                              that Ray accepted ends it, as Ray ends a drained
                                              idle raylet (`AgentWorld.drained`)
    DestroySelf                               vast's API, `DELETE /api/v0/instances/<own id>/`
                                              with the container's own CONTAINER_API_KEY
                                              (`vastsim.InProcessTransport`), read by
                                              `agent.ending.destroy_outcome`
    SaveIdentity / ForgetIdentity             the instance's disk (`AgentWorld.disks`): kept
                                              across its boots, gone with the instance
    Exit                                      PID 1 exits (`Container.exit`): during vast's
                                              stop, the stop is done; otherwise vast starts
                                              the container again, as it does

The settings come from the container's environment (`agent.config.Settings.from_env`), which the
real launcher wrote into the create request (join token, CA, head address, thresholds).

The image's Ray and Python (what `agent.rayversion.probe` would find in it) are the world's:
`AgentWorld.images` by image name, else `AgentWorld.default_image` (the head's own, as in the
process runner, whose containers run this machine's Ray), with the match level of the
container's `RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL` when its environment sets one.

Failures are injected at the boundary only, never by scripting the agent's answers
(`ContainerFault`): the image (no Python: PID 1 exits at once; PID 1 idles and never runs the
agent; `ray` cannot start), the network (the head unreachable from this container, only its
heartbeats blocked, vast's API unreachable; a host vastsim took offline has no network at all),
PID 1 killed (a crash: vast starts the container again), Ray (its process exits at a time; its
node busy or idle, which is what the utilisation sample shows). vastsim's own faults act as
vastsim makes them act: its stops (stop, reboot, exited, offline) are docker stops, TERM to PID 1
with a grace before the KILL (`ScriptedRunner(stop_grace=...)`), which the agent answers as it
answers every TERM.

Not simulated: the bootloader's download (the agent starts at once, so a head unreachable at boot
ends a candidate as `no_enrollment` after its window where the real bootloader would end it as
`agent_download_failed` after its own, by default both 10 minutes), and the agent's start-up
time (the seed measured about a second).

Turns: the harness marks the world busy while the controller ticks (`AgentWorld.turn`); an agent
whose moment comes meanwhile (the vast client's retry sleeps advance the virtual clock) waits for
the tick to end, as the head's handlers wait for the records lock in the real head.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import ssl
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent import ending, lifecycle, messages, raynode, transport
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
from agent.config import ConfigError, Settings, vast_url
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
from agent.state import AgentState, Report, Timings, initial
from reconciler.head.app import Answer, HeadApp
from reconciler.model.rayversions import MATCH_LEVEL_ENV, RayVersions
from vastsim import Behaviour, Container, ContainerSpec, InProcessTransport, Sim

DOCKER_STOP_GRACE = 10.0  # docker stop's default: TERM, then KILL this long after
RAY_STARTUP = 8.0  # seconds from `ray start` to a listening raylet (the seed: 7.9 s)
# From Ray accepting an idle drain of a node to its raylet's exit (Ray ends a drained idle
# raylet at once: `ray start --block` then exits, and the agent sees Ray exit).
RAY_DRAINED_EXIT = 0.5
UNREACHABLE = "connection timed out (the network is down)"
REFUSED = "connection refused"


class Image(StrEnum):
    """What the image does with the launcher's command line."""

    AGENT = "agent"  # it has python3: the bootloader runs the agent
    NO_PYTHON = "no-python"  # no python3: PID 1 exits 127 at once (vast starts it again, and again)
    IDLES = "idles"  # PID 1 runs but never starts the agent (an entrypoint that ignores args)
    NO_RAY = "no-ray"  # the agent runs, `ray` cannot be started: an error in the bootstrap


@dataclass(frozen=True)
class Span:
    """A stretch of virtual time, [start, end)."""

    start: float = -math.inf
    end: float = math.inf

    def covers(self, now: float) -> bool:
        return self.start <= now < self.end


@dataclass(frozen=True)
class ContainerFault:
    """What goes wrong at the boundary of one instance's container (every boot of it)."""

    image: Image = Image.AGENT
    head_unreachable: Span | None = None  # /enroll, /heartbeat and /report get no answer
    heartbeats_blocked: Span | None = None  # only port B is refused (the head's heartbeat port)
    vast_unreachable: Span | None = None  # the self-destroy gets no answer
    ray_exits_at: float | None = None  # Ray's process exits then (at once if started later)
    ray_exit_code: int = 1
    pid1_killed_at: float | None = None  # PID 1 dies then (OOM, crash): vast starts it again
    working: Callable[[float], bool] | None = None  # this node's work over time (else the fleet's)

    @classmethod
    def network_cut(cls, at: float, **more: Any) -> ContainerFault:
        """The container loses its network at `at`: no head, no vast API (its host still runs)."""
        return cls(head_unreachable=Span(at), vast_unreachable=Span(at), **more)


HEALTHY = ContainerFault()


@dataclass(frozen=True)
class Route:
    """Where one URL of a head goes, in-process."""

    app: HeadApp
    endpoint: str  # enroll, report, heartbeat, resume


class AgentWorld:
    """The containers' surroundings: the heads by URL, vast in-process, the faults, the work.

    It is the `ScriptedRunner`'s factory (`behaviour`), and it keeps every boot of every
    instance's agent for the tests to read (`boots`, `agent`)."""

    def __init__(self, *, bootloader: str) -> None:
        self.bootloader = bootloader
        self.sim: Sim | None = None
        self.routes: dict[tuple[str, str], Route] = {}
        self.faults: dict[int, ContainerFault] = {}
        self.next_fault: Callable[[int], ContainerFault] = lambda vast_id: HEALTHY
        self.working: Callable[[float], bool] = lambda now: True
        self.on_enrolled: Callable[[int, float], None] = lambda vast_id, now: None
        # a boot that resumed after a deliberate stop (the head started its instance again)
        self.on_resumed: Callable[[int, float], None] = lambda vast_id, now: None
        # The Ray and Python each image runs Ray with (None: the agent cannot tell).
        self.images: dict[str, RayVersions] = {}
        self.default_image: RayVersions | None = None
        self.boots: dict[int, list[AgentBehaviour]] = {}
        # What each instance's disk keeps across its boots: the identity a deliberate stop saved
        # (`agent.identity` on a real container), by vast id; a destroy takes it away.
        self.disks: dict[int, dict[str, Any]] = {}
        self._busy = 0

    def attach(self, sim: Sim) -> None:
        self.sim = sim

    def serve(self, app: HeadApp) -> None:
        """Route the head's endpoints (its enrollment and heartbeat URLs) to `app`."""
        enroll = app.endpoints.enroll_url
        beat = urlsplit(app.endpoints.heartbeat_url)
        beat_base = f"{beat.scheme}://{beat.netloc}"
        resume = urlsplit(messages.resume_url(app.endpoints.heartbeat_url)).path
        keys = ((enroll, "/enroll"), (enroll, "/report"), (beat_base, beat.path))
        for key in (*keys, (beat_base, resume)):
            if key in self.routes:
                raise ValueError(f"two heads at {key[0]}{key[1]}")
        self.routes[(enroll, "/enroll")] = Route(app, "enroll")
        self.routes[(enroll, "/report")] = Route(app, "report")
        self.routes[(beat_base, beat.path)] = Route(app, "heartbeat")
        self.routes[(beat_base, resume)] = Route(app, "resume")

    # --- faults and work -------------------------------------------------------------------

    def fault(self, vast_id: int) -> ContainerFault:
        """This instance's fault, chosen by `next_fault` the first time it is asked for; a test may
        replace it in `faults` at any time (it is read at every step)."""
        if vast_id not in self.faults:
            self.faults[vast_id] = self.next_fault(vast_id)
        return self.faults[vast_id]

    def runtime(self, spec: ContainerSpec) -> dict[str, Any]:
        """What the agent of a container of `spec` reports as its image's Ray and Python."""
        image = self.images.get(spec.image, self.default_image) or RayVersions(None, None)
        found: dict[str, Any] = {
            "ray_version": image.ray,
            "python_version": image.python,
            "source": f"vastsim: image {spec.image}"[:400],
        }
        level = spec.env.get(MATCH_LEVEL_ENV) or image.python_match_level
        if level:
            found["python_version_match_level"] = level[:32]
        return found

    def drained(self, vast_id: int, now: float) -> None:
        """Ray accepted an idle drain of this instance's node (`Signals.drain_idle` of a
        scenario, as autoscaler v2 drains for idle termination): its raylet exits moments later,
        as Ray's does, and the agent sees Ray exit."""
        agent = self.agent(vast_id)
        if agent is not None:
            agent.drained(now)

    def works(self, vast_id: int, now: float) -> bool:
        own = self.fault(vast_id).working
        return (own or self.working)(now)

    def offline(self, vast_id: int) -> bool:
        """A host vastsim took offline has no network at all."""
        inst = self.sim.instance(vast_id) if self.sim is not None else None
        return inst is not None and inst.machine.offline

    # --- turns -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Someone acts on the shared records (a controller tick, an agent's commands): agents
        whose moment comes meanwhile wait until it is over."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    @property
    def busy(self) -> bool:
        return self._busy > 0

    # --- the runner's factory and what the agents did ---------------------------------------

    def behaviour(self, spec: ContainerSpec) -> Behaviour:
        """The agent for a container that runs our bootloader; the image's own PID 1 (vastsim's
        default behaviour) for any other (an orphan created without it, an exempt node type)."""
        if spec.args is None or not spec.args or spec.args[-1] != self.bootloader:
            return Behaviour()
        agent = AgentBehaviour(self, spec)
        self.boots.setdefault(spec.instance_id, []).append(agent)
        return agent

    def agent(self, vast_id: int) -> AgentBehaviour | None:
        """The latest boot's agent of an instance."""
        boots = self.boots.get(vast_id)
        return boots[-1] if boots else None

    def reports(self) -> list[tuple[int, float, Report]]:
        """(instance, when, report) of every report any agent sent, in time order."""
        found = [
            (vast_id, at, report)
            for vast_id, boots in self.boots.items()
            for agent in boots
            for at, report, _ in agent.reports[:1]
        ]
        return sorted(found, key=lambda r: (r[1], r[0]))


class AgentBehaviour(Behaviour):
    """One boot of one container's agent: `agent.lifecycle` on vastsim's clock."""

    def __init__(self, world: AgentWorld, spec: ContainerSpec) -> None:
        self.world = world
        self.spec = spec
        self.vast_id = spec.instance_id
        self.boot = spec.boot
        self.boot_id = f"{spec.instance_id:08x}{spec.boot:04x}"
        self.container: Container | None = None
        self.settings: Settings | None = None
        self.state: AgentState | None = None  # None: no agent runs in this boot
        self.alive = True
        self.started_at: float | None = None
        self.stopped_at: float | None = None  # docker stop's TERM
        self.enrolled_at: float | None = None
        self.resumed_at: float | None = None
        self.exited_at: float | None = None  # PID 1 exited by itself (a deliberate stop)
        self.ray_since: float | None = None
        self.ray_gone_at: float | None = None
        self.ray_drained_at: float | None = None  # Ray accepted an idle drain: its exit is due
        # (when, what was sent or done, the answer's status or None)
        self.trace: list[tuple[float, Command]] = []
        self.reports: list[tuple[float, Report, int | None]] = []
        self.destroys: list[tuple[float, bool, str]] = []
        self.beats: list[tuple[float, int | None]] = []
        self._queue: deque[Event] = deque()
        self._queued_at: float | None = None
        self._wake: float | None = None
        self._cert_der = b""
        self._worker_ports = 0
        self._last_sample: float | None = None
        self._vast: httpx.Client | None = None

    # --- what a test reads -----------------------------------------------------------------

    @property
    def phase(self) -> str | None:
        return self.state.phase if self.state is not None else None

    @property
    def ending(self) -> Report | None:
        return self.state.ending if self.state is not None else None

    @property
    def last_heartbeat_success(self) -> float | None:
        ok = [at for at, status in self.beats if status == 200]
        return ok[-1] if ok else None

    @property
    def fault(self) -> ContainerFault:
        return self.world.fault(self.vast_id)

    def drained(self, now: float) -> None:
        """Ray drained this node for idle termination: the raylet exits `RAY_DRAINED_EXIT`
        later (a node whose Ray is not running has nothing to end)."""
        if self._ray_running and self.ray_drained_at is None:
            self.ray_drained_at = now
            self._log(now, "Ray drained the node for idle termination: the raylet exits")

    @property
    def _drained_exit_at(self) -> float | None:
        if self.ray_drained_at is None or not self._ray_running:
            return None
        return self.ray_drained_at + RAY_DRAINED_EXIT

    # --- vastsim's Behaviour ---------------------------------------------------------------

    def on_start(self, container: Container, now: float) -> None:
        self.container = container
        self.started_at = now
        image = self.fault.image
        if image is Image.NO_PYTHON:
            container.log("exec: python3: not found")
            self.alive = False
            container.exit(127)
            return
        if image is Image.IDLES:
            container.log("the image's PID 1 idles; the agent never starts")
            return
        try:
            settings = Settings.from_env(container.env)
        except ConfigError as exc:  # as agent.main.unconfigured: end with nobody to report to
            settings = Settings(
                instance_id=self.vast_id,
                instance_key=container.env.get("CONTAINER_API_KEY", ""),
                join_token="",
                head_address="",
                enroll_port=0,
                ca_pem="",
                vast_url=vast_url(container.env),
                report_wait=0.0,
            )
            self._push(BootstrapError(str(exc)), now)
        else:
            gpus = int(container.env.get("GPU_COUNT", "0") or 0)
            self._push(Started(self._cpus(), gpus), now)
        self.settings = settings
        timings = Timings.of(settings)
        saved = self.world.disks.get(self.vast_id)
        self.state = initial(timings, started=now, record_id=settings.record_id, saved=saved)
        self._log(now, f"agent on vastsim, boot {self.boot_id} of instance {self.vast_id}")

    def on_signal(self, container: Container, sig: int, now: float) -> None:
        """TERM, INT, HUP from inside (vastsim forwards no other): the agent's handler queues it.
        PID 1 without an agent has no handler, so the kernel drops it."""
        if self.state is not None:
            self._push(Signalled(signal.Signals(sig).name), now)

    def on_stop(self, container: Container, now: float) -> None:
        """docker stop: TERM to PID 1; the runner keeps this boot running through the grace."""
        self.stopped_at = now
        if self.state is not None:
            self._push(Signalled("SIGTERM"), now)

    def on_destroy(self, container: Container, now: float) -> None:
        self.alive = False
        self.world.disks.pop(self.vast_id, None)
        if self._vast is not None:
            self._vast.close()
            self._vast = None

    def next_wakeup(self, container: Container) -> float | None:
        if not self.alive:
            return None
        if self._queue:
            return self._queued_at
        fault = self.fault
        times = [self._wake]
        if fault.pid1_killed_at is not None and self._dies_in_this_boot(fault.pid1_killed_at):
            times.append(fault.pid1_killed_at)
        if self._ray_running and fault.ray_exits_at is not None:
            times.append(fault.ray_exits_at)
        times.append(self._drained_exit_at)
        known = [t for t in times if t is not None]
        return min(known) if known else None

    def step(self, container: Container, now: float) -> None:
        if not self.alive or self.world.busy:
            return
        with self.world.turn():
            self._boundary(container, now)
            if self.state is None:
                return
            if not self._queue and self._wake is not None and now >= self._wake:
                self._push(Tick(), now)
            # answers already in (vast's to the destroy that just ended this container) are
            # still read: they came back at this very moment
            while self._queue:
                self._feed(self._queue.popleft(), now)

    # --- the machine -----------------------------------------------------------------------

    def _push(self, event: Event, now: float) -> None:
        if not self._queue:
            self._queued_at = now
        self._queue.append(event)

    def _feed(self, event: Event, now: float) -> None:
        assert self.state is not None
        self.state, commands = lifecycle.step(self.state, event, now)
        self._wake = None
        for command in commands:
            if not isinstance(command, WakeAt):
                self.trace.append((now, command))
            self._execute(command, now)

    def _boundary(self, container: Container, now: float) -> None:
        """What the world does to this container now: PID 1 killed, Ray's process ending."""
        fault = self.fault
        killed = fault.pid1_killed_at
        if killed is not None and self._dies_in_this_boot(killed) and now >= killed:
            self._log(now, "PID 1 killed")
            self.alive = False
            container.exit(137)
            return
        if self._ray_running and fault.ray_exits_at is not None and now >= fault.ray_exits_at:
            self.ray_gone_at = now
            self._push(RayExited(fault.ray_exit_code), now)
        drained = self._drained_exit_at
        if drained is not None and now >= drained:
            self.ray_gone_at = now
            self._log(now, "Ray exited: the node was drained")
            self._push(RayExited(0), now)

    def _dies_in_this_boot(self, at: float) -> bool:
        return self.started_at is not None and at >= self.started_at

    @property
    def _ray_running(self) -> bool:
        return self.ray_since is not None and self.ray_gone_at is None

    def _execute(self, command: Command, now: float) -> None:
        if isinstance(command, Log):
            self._log(now, command.message)
        elif isinstance(command, WakeAt):
            self._wake = command.at
        elif isinstance(command, SendEnroll):
            self._push(self._enroll(now), now)
        elif isinstance(command, StartRay):
            self._start_ray(command, now)
        elif isinstance(command, SendHeartbeat):
            self._push(self._heartbeat(command, now), now)
        elif isinstance(command, SendReport):
            self._push(self._report(command, now), now)
        elif isinstance(command, StopRay):
            if self._ray_running:
                self.ray_gone_at = now
                self._log(now, "stopping Ray (process group)")
        elif isinstance(command, DestroySelf):
            self._push(self._destroy(now), now)
        else:
            self._execute_disk(command, now)

    def _execute_disk(self, command: Command, now: float) -> None:
        """A resume, and what a deliberate stop does: the identity kept or forgotten on the
        instance's disk, PID 1's exit."""
        if isinstance(command, SendResume):
            self._push(self._resume(now), now)
        elif isinstance(command, SaveIdentity):
            self.world.disks[self.vast_id] = dict(command.identity)
            self._log(now, "identity kept on the instance's disk")
            self._push(IdentitySaved(True), now)
        elif isinstance(command, ForgetIdentity):
            self.world.disks.pop(self.vast_id, None)
        elif isinstance(command, Exit):
            self._log(now, f"PID 1 exits ({command.code}) without destroying")
            self.alive = False
            self.exited_at = now
            if self.container is not None:
                self.container.exit(command.code)
        else:
            raise TypeError(f"not an agent command: {command!r}")

    # --- the head, in-process --------------------------------------------------------------

    def _enroll(self, now: float) -> Event:
        settings, state = self._ready()
        body = messages.enroll_body(
            settings,
            boot_id=self.boot_id,
            cpus=state.cpus,
            cpu_source="vastsim",
            gpus=state.gpus,
            runtime=self.world.runtime(self.spec),
        )
        answer = self._post(f"{settings.enroll_url}/enroll", body, now)
        if isinstance(answer, str):
            return EnrollFailed(answer)
        status, doc = answer
        if status == 200 and isinstance(doc, dict):
            self.enrolled_at = now
            self.world.on_enrolled(self.vast_id, now)
        return EnrollAnswered(status, doc)

    def _resume(self, now: float) -> Event:
        settings, state = self._ready()
        saved = state.saved or {}
        body = messages.resume_body(
            settings,
            record_id=state.record_id,
            boot_id=self.boot_id,
            cpus=state.cpus,
            cpu_source="vastsim",
            gpus=state.gpus,
            runtime=self.world.runtime(self.spec),
        )
        self._cert_der = ssl.PEM_cert_to_DER_cert(saved["certificate"]["cert_pem"])
        answer = self._post(messages.resume_url(str(saved["heartbeat"]["url"])), body, now)
        if isinstance(answer, str):
            return ResumeFailed(answer)
        status, doc = answer
        if status == 200 and isinstance(doc, dict):
            self.resumed_at = now
            self.world.on_resumed(self.vast_id, now)
        return ResumeAnswered(status, doc)

    def _start_ray(self, command: StartRay, now: float) -> None:
        settings, _ = self._ready()
        ray = command.answer["ray"]
        self._cert_der = ssl.PEM_cert_to_DER_cert(command.answer["certificate"]["cert_pem"])
        self._worker_ports = len(ray["worker_ports"])
        plan = raynode.ray_plan(
            settings.ray_command,
            ray,
            cpus=command.cpus,
            gpus=command.gpus,
            # a name only: no file in a simulated container
            token_path="/tmp/rv-ray/auth_token",  # noqa: S106, S108
            base_env=self.spec.env,
            node_ip=settings.source_ip,
        )
        if self.fault.image is Image.NO_RAY or not self.spec.has_ray:
            problem = f"[Errno 2] No such file or directory: {plan.argv[0]!r}"
            self._push(BootstrapError(f"cannot start Ray ({plan.argv[0]}): {problem}"), now)
            return
        self._log(now, "starting Ray: " + " ".join(plan.argv[:3]) + " ...")
        self.ray_since = now

    def _heartbeat(self, command: SendHeartbeat, now: float) -> Event:
        settings, state = self._ready()
        since = self.ray_since if self.ray_since is not None else now
        body = messages.heartbeat_body(
            settings,
            record_id=state.record_id,
            boot_id=self.boot_id,
            seq=command.seq,
            sent_at=now,
            ray={
                "state": "running" if now >= since + RAY_STARTUP else "starting",
                "pid": 4242,
                "exit_code": None,
                "uptime_seconds": round(now - since, 3),
            },
            processes={"pids": 120, "pids_limit": None, "ray_processes": 8},
            worker_ports={"in_use": [], "total": self._worker_ports},
            utilisation=self._sample(now, state.gpus),
            stop_acknowledged=command.stop_acknowledged,
        )
        answer = self._post(self._heartbeat_url(), body, now)
        status = None if isinstance(answer, str) else answer[0]
        self.beats.append((now, status))
        if isinstance(answer, str):
            return HeartbeatFailed(answer)
        return HeartbeatAnswered(*answer)

    def _sample(self, now: float, gpus: int) -> dict[str, Any]:
        """The utilisation sample: the node's work now, as `agent.sampling` would read it (the
        first sample of a boot has no rates yet, the GPU reading does not need one)."""
        work = self.world.works(self.vast_id, now)
        previous, self._last_sample = self._last_sample, now
        seconds = None if previous is None else round(now - previous, 3)
        rated = seconds is not None
        return {
            "sample_seconds": seconds,
            "cpu_fraction": (0.8 if work else 0.01) if rated else None,
            "load1": 4.0 if work else 0.0,
            "memory_used_fraction": 0.4,
            "net_rx_bytes": (50_000_000 if work else 0) if rated else None,
            "net_tx_bytes": (5_000_000 if work else 0) if rated else None,
            "gpu_fraction": (0.9 if work else 0.0) if gpus else None,
            "cpu_source": "cgroup" if rated else None,
            # a quiet GPU still holds what the last task's framework cached: not traffic
            "gpu_memory_fraction": (0.6 if work else 0.4) if gpus else None,
            "gpu_memory_activity": (0.5 if work else 0.0) if gpus else None,
            "gpu_source": "nvml" if gpus else None,
        }

    def _report(self, command: SendReport, now: float) -> Event:
        settings, _ = self._ready()
        if not settings.head_address:
            self.reports.append((now, command.report, None))
            return ReportDone(None, error="no head to report to")
        body = messages.report_body(settings, boot_id=self.boot_id, report=command.report, at=now)
        answer = self._post(f"{settings.enroll_url}/report", body, now)
        self.reports.append((now, command.report, None if isinstance(answer, str) else answer[0]))
        if isinstance(answer, str):
            return ReportDone(None, error=answer)
        return ReportDone(*answer)

    def _heartbeat_url(self) -> str:
        answer = self.state.answer if self.state is not None else None
        return str(answer["heartbeat"]["url"]) if answer else ""

    def _post(self, url: str, body: Mapping[str, Any], now: float) -> tuple[int, Any] | str:
        """One POST to a head: (status, doc), or why nothing answered."""
        parts = urlsplit(url)
        route = self.world.routes.get((f"{parts.scheme}://{parts.netloc}", parts.path))
        fault = self.fault
        if self.world.offline(self.vast_id) or (
            fault.head_unreachable is not None and fault.head_unreachable.covers(now)
        ):
            return f"{url}: {UNREACHABLE}"
        if route is None:
            return f"{url}: {REFUSED}"
        data = json.dumps(body).encode()
        peer = self.spec.public_ip  # where the head sees the container's traffic come from
        if route.endpoint in ("heartbeat", "resume"):
            if fault.heartbeats_blocked is not None and fault.heartbeats_blocked.covers(now):
                return f"{url}: {REFUSED}"
            if route.endpoint == "resume":
                answer = route.app.resume(self._cert_der, data, peer=peer)
            else:
                answer = route.app.heartbeat(self._cert_der, data, peer=peer)
        elif route.endpoint == "enroll":
            answer = route.app.enroll(data, peer=peer)
        else:
            answer = route.app.report(data, peer=peer)
        return answer.status, _doc(answer)

    # --- vast, in-process --------------------------------------------------------------------

    def _destroy(self, now: float) -> Event:
        settings, _ = self._ready()
        fault = self.fault
        sim = self.world.sim
        if (
            sim is None
            or self.world.offline(self.vast_id)
            or (fault.vast_unreachable is not None and fault.vast_unreachable.covers(now))
        ):
            confirmed, what = False, f"no answer: {settings.destroy_url}: {UNREACHABLE}"
        else:
            if self._vast is None:
                where = InProcessTransport(sim, client_address=self.spec.public_ip)
                self._vast = httpx.Client(transport=where)
            try:
                response = self._vast.delete(
                    settings.destroy_url, headers=ending.destroy_headers(settings)
                )
            except httpx.HTTPError as exc:
                confirmed, what = False, f"no answer: {exc}"
            else:
                reply = transport.Reply(response.status_code, _json_or_text(response.content))
                confirmed, what = ending.destroy_outcome(reply)
        self.destroys.append((now, confirmed, what))
        return DestroyAnswered(confirmed, what)

    # --- small things ------------------------------------------------------------------------

    def _ready(self) -> tuple[Settings, AgentState]:
        assert self.settings is not None and self.state is not None
        return self.settings, self.state

    def _cpus(self) -> int:
        """The container's share of the host's cores (what `agent.cores` reads from cgroups)."""
        inst = self.world.sim.instance(self.vast_id) if self.world.sim is not None else None
        if inst is None:
            return 1
        machine = inst.machine
        return max(1, machine.cpu_cores * inst.num_gpus // max(1, machine.num_gpus))

    def _log(self, now: float, message: str) -> None:
        if self.container is not None:
            self.container.log(f"[rv-agent {now:.1f}] {message}")


def _doc(answer: Answer) -> Any:
    return _json_or_text(answer.body)


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
