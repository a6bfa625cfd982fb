"""The agent as PID 1: enroll, start Ray, heartbeat, watch Ray, and end every way the seed lists.

    candidate --enroll--> worker --ray start--> heartbeats every interval, Ray watched
        |                    |                        |
        +--------------------+------------------------+--> report, stop Ray, destroy, never exit

Every ending of the seed's table that the container acts on is one `Ending(reason, detail)`:

    no heartbeat success for worker_gives_up_after_seconds   no_heartbeat_success
    a 403 answer to a heartbeat                              heartbeat_refused
    a 403 answer to /enroll                                  enroll_refused
    the head refuses a second enrollment (a restart)         second_enrollment
    no enrollment within candidate_self_destroy_seconds      no_enrollment
    Ray on the worker exits                                  ray_exited
    TERM, INT or HUP to PID 1                                signal
    an error in the bootstrap                                bootstrap_error

`Ending` is a BaseException, raised even from the signal handler, so it unwinds whatever the
agent is doing (a blocked request, a sleep) and no `except Exception` on the way swallows it. QUIT,
USR1 and USR2 are ignored (as the kernel drops them for a PID 1 without handlers); KILL cannot be
caught, and inside a container it cannot reach PID 1 either.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from agent import cores, ending, raynode, sampling, transport
from agent.config import Settings

PROTOCOL = 1
LOOP_SECONDS = 0.2
REQUEST_TIMEOUT = 10.0
IGNORED_SIGNALS = (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Ending(BaseException):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Boot:
    """This start of the container's PID 1: when (monotonic) and a random id for the head."""

    started: float
    boot_id: str


class Watchdog:
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
        self.sampler = sampler or sampling.Sampler()
        self.phase = "candidate"
        self.record_id = settings.record_id
        self.ray: raynode.RayProcess | None = None
        self.answer: dict[str, Any] = {}
        self.stop_grace = 3.0

    # --- the whole life --------------------------------------------------------------------

    def run(self) -> NoReturn:
        try:
            self.arm_signals()
            machine = cores.read_cores()
            gpus = cores.read_gpus()
            self.log(f"{machine.cores} CPUs ({machine.source}), {gpus} GPUs")
            self.answer = self.enroll(machine, gpus)
            self.phase = "worker"
            self.start_ray(machine.cores, gpus)
            self.serve()
        except Ending as why:
            self.end(why.reason, why.detail)
        except BaseException as exc:  # anything else is an error in the bootstrap
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self.end("bootstrap_error", detail)

    def arm_signals(self) -> None:
        def on_signal(signum: int, frame: Any) -> None:
            ending.disarm_signals(self.log)
            raise Ending("signal", f"{signal.Signals(signum).name} to PID 1")

        for sig in ENDING_SIGNALS:
            signal.signal(sig, on_signal)
        for sig in IGNORED_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def end(self, reason: str, detail: str) -> NoReturn:
        ending.disarm_signals(self.log)
        report = {
            "protocol": PROTOCOL,
            "token": self.settings.join_token,
            "instance_id": self.settings.instance_id,
            "boot_id": self.boot.boot_id,
            "record_id": self.record_id or None,
            "phase": self.phase,
            "reason": reason,
            "detail": detail[:4000],
            "at": time.time(),
        }
        ending.end(self.settings, report, stop_ray=self.stop_ray, log=self.log)

    def stop_ray(self) -> None:
        if self.ray is not None:
            self.log(f"stopping Ray (process group {self.ray.pid})")
            self.ray.stop(self.stop_grace)

    # --- candidate: enroll -----------------------------------------------------------------

    def enroll(self, machine: cores.CoreCount, gpus: int) -> dict[str, Any]:
        s = self.settings
        body = {
            "protocol": PROTOCOL,
            "token": s.join_token,
            "instance_id": s.instance_id,
            "boot_id": self.boot.boot_id,
            "public_ip": s.public_ip,
            "ports": {str(k): v for k, v in sorted(s.ports.items())},
            "machine": {"cpus": machine.cores, "cpu_source": machine.source[:200], "gpus": gpus},
        }
        if s.agent_sha256:
            body["agent_sha256"] = s.agent_sha256
        context = transport.pinned_context(s.ca_pem)
        deadline = self.boot.started + s.candidate_self_destroy
        pause = min(5.0, max(0.2, s.candidate_self_destroy / 10))
        last = "no attempt yet"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                window = f"{s.candidate_self_destroy:g}s"
                raise Ending("no_enrollment", f"not enrolled within {window} (last: {last})")
            try:
                reply = transport.request(
                    f"{s.enroll_url}/enroll",
                    method="POST",
                    body=body,
                    context=context,
                    timeout=min(REQUEST_TIMEOUT, left),
                )
            except transport.TransportError as exc:
                last = str(exc)
            else:
                if reply.status == 200 and isinstance(reply.doc, dict):
                    self.log(f"enrolled as {reply.doc['record_id']} in slot {reply.doc['slot_id']}")
                    self.record_id = str(reply.doc["record_id"])
                    return reply.doc
                if reply.status == 403:
                    restart = reply.error() == "second_enrollment"
                    reason = "second_enrollment" if restart else "enroll_refused"
                    raise Ending(reason, f"the head refused the enrollment: {reply.describe()}")
                last = reply.describe()
            self.log(f"enrollment not done: {last}")
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))

    # --- worker: Ray and heartbeats ----------------------------------------------------------

    def start_ray(self, cpus: int, gpus: int) -> None:
        ray = self.answer["ray"]
        limits = self.answer.get("thresholds", {})
        self.settings = dataclasses.replace(
            self.settings,
            heartbeat_interval=float(limits.get("heartbeat_interval_seconds", 30.0)),
            worker_gives_up_after=float(limits.get("worker_gives_up_after_seconds", 300.0)),
            report_wait=float(limits.get("report_wait_seconds", self.settings.report_wait)),
            self_destroy_retry=float(
                limits.get("self_destroy_retry_seconds", self.settings.self_destroy_retry)
            ),
        )
        self.stop_grace = float(limits.get("ray_stop_grace_seconds", self.stop_grace))
        plan = raynode.ray_plan(
            self.settings.ray_command,
            ray,
            cpus=cpus,
            gpus=gpus,
            token_path=raynode.write_token(str(ray["auth_token"])),
            base_env=self.env,
        )
        self.log("starting Ray: " + " ".join(plan.argv))
        try:
            self.ray = raynode.RayProcess(plan)
        except OSError as exc:
            raise Ending("bootstrap_error", f"cannot start Ray ({plan.argv[0]}): {exc}") from exc

    def serve(self) -> NoReturn:
        ray = self.ray
        if ray is None:
            raise Ending("bootstrap_error", "Ray was not started")
        cert = self.answer["certificate"]
        context = transport.pinned_context(
            cert["ca_pem"], cert_pem=cert["cert_pem"], key_pem=cert["key_pem"]
        )
        url = str(self.answer["heartbeat"]["url"])
        worker_ports = [int(p) for p in self.answer["ray"]["worker_ports"]]
        node_manager = int(self.answer["ray"]["node_manager_port"])
        last_ok = time.monotonic()
        next_beat = last_ok
        seq = 0
        pid_one = os.getpid() == 1
        while True:
            code = ray.poll()
            if code is not None:
                raise Ending("ray_exited", f"Ray exited with code {code}")
            if pid_one:
                raynode.reap_orphans(keep=ray.pid)
            now = time.monotonic()
            if now >= next_beat:
                seq += 1
                beat = self.heartbeat(seq, ray, worker_ports, node_manager)
                if self.send_heartbeat(url, beat, context):
                    last_ok = time.monotonic()
                next_beat = now + self.settings.heartbeat_interval
            silent = time.monotonic() - last_ok
            gives_up = self.settings.worker_gives_up_after
            if silent >= gives_up:
                limit = f"limit {gives_up:g}s"
                raise Ending(
                    "no_heartbeat_success", f"no heartbeat success for {silent:.0f}s ({limit})"
                )
            time.sleep(LOOP_SECONDS)

    def send_heartbeat(self, url: str, beat: dict[str, Any], context: Any) -> bool:
        try:
            reply = transport.request(
                url,
                method="POST",
                body=beat,
                context=context,
                timeout=min(REQUEST_TIMEOUT, self.settings.heartbeat_interval),
            )
        except transport.TransportError as exc:
            self.log(f"heartbeat {beat['seq']} failed: {exc}")
            return False
        if reply.status == 403:
            raise Ending("heartbeat_refused", f"the head refused a heartbeat: {reply.describe()}")
        if reply.status != 200:
            self.log(f"heartbeat {beat['seq']} not taken: {reply.describe()}")
            return False
        self.retune(reply.doc)
        return True

    def retune(self, answer: Any) -> None:
        """The head may change the heartbeat thresholds without a new container."""
        if not isinstance(answer, dict):
            return
        s = self.settings
        self.settings = dataclasses.replace(
            s,
            heartbeat_interval=_positive(answer.get("heartbeat_interval_seconds"))
            or s.heartbeat_interval,
            worker_gives_up_after=_positive(answer.get("worker_gives_up_after_seconds"))
            or s.worker_gives_up_after,
        )

    def heartbeat(
        self, seq: int, ray: raynode.RayProcess, worker_ports: list[int], node_manager: int
    ) -> dict[str, Any]:
        pids, limit = self.sampler.processes()
        state = "running" if self.sampler.listening(node_manager) else "starting"
        return {
            "protocol": PROTOCOL,
            "instance_id": self.settings.instance_id,
            "record_id": self.record_id,
            "boot_id": self.boot.boot_id,
            "seq": seq,
            "sent_at": time.time(),
            "ray": {
                "state": state,
                "pid": ray.pid,
                "exit_code": None,
                "uptime_seconds": round(ray.uptime(), 3),
            },
            "processes": {
                "pids": pids,
                "pids_limit": limit,
                "ray_processes": group_size(ray.pid),
            },
            "worker_ports": {
                "in_use": self.sampler.ports_in_use(worker_ports),
                "total": len(worker_ports),
            },
            "utilisation": self.sampler.utilisation(),
        }


def _positive(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


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
