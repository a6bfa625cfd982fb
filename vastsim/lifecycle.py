"""Instance life cycles on an injectable clock.

    create -> null -> created -> loading (image pull unless cached) -> running
    stop -> stopped            start -> loading -> running, or scheduling while the GPUs are taken
                               (a start pulls nothing: the image is on the instance's disk; the
                               meter bills storage only until it runs again)
    reboot -> rebooting -> running (the container restarts: a new boot)
    recycle -> recycling -> loading (fresh pull) -> running
    destroy -> gone (show answers null at once; the listing may keep the row for a lag)
    faults: exited, offline, unknown, OCI create failure (stuck in created), never boots (stuck in
    loading), public IP change, spot outbid (stopped with intended/cur/next all "stopped")

Transitions are events on a time-ordered queue and carry their exact time, so the billing meter
sees every status change at the second it happened however coarsely time is stepped. Each instance
has an epoch; a user action bumps it, which cancels that instance's pending transitions.

Container start/stop/destroy are not done here: they are queued as actions that the simulator
hands to its runner outside its lock (see `vastsim.containers.protocol`).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vastsim.billing import Meter
from vastsim.containers.protocol import ContainerSpec, Runner
from vastsim.instances import Instance, requested_ports
from vastsim.market import Machine, Market

OCI_ERROR = (
    "Error response from daemon: failed to create task for container: failed to create shim "
    "task: OCI runtime create failed: runc create failed: unable to start container process: "
    "error during container init: error running hook #0: error running hook: exit status 1, "
    "stdout: , stderr: nvidia-container-cli: initialization error: nvml error: driver not "
    "loaded: unknown"
)
PENDING_STATUSES = frozenset({None, "created", "loading", "running", "rebooting", "recycling"})
MIN_RESTART = 0.001


@dataclass(frozen=True)
class Timing:
    """Seconds each step of the life cycle takes (pull time comes on top of `container_start`
    when the host does not hold the image: size / pull speed)."""

    provision: float = 4.0
    create: float = 6.0
    container_start: float = 10.0
    reboot: float = 10.0
    restart: float = 2.0
    destroy_list_lag: float = 0.0
    # From a stop call to its effect (docker stop's TERM to PID 1, status `stopped`): vast
    # carries a stop out seconds after it answered the call; until then the instance runs on
    # with `intended_status` stopped. Tests vary it (0 to 10 s); 0 stops at the call. The
    # default is what the seed measured of vast's TERM after a call (3.3 s at most), so a
    # stop that only works when TERM lands at the call fails here as it does on vast.
    stop_delay: float = 3.0

    @classmethod
    def instant(cls) -> Timing:
        """Everything at once (pulls still take size / pull speed)."""
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @classmethod
    def fast(cls) -> Timing:
        """Sub-second steps, for real-time tests."""
        return cls(0.05, 0.05, 0.1, 0.1, 0.05, 0.0, 0.5)


@dataclass(frozen=True)
class CreateRequest:
    """The parts of a create body that shape the instance."""

    image: str
    disk: float
    label: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    onstart: str | None = None
    runtype: str = "ssh"
    args: tuple[str, ...] | None = None
    bid_price: float | None = None
    template_hash_id: str | None = None


@dataclass(frozen=True)
class ContainerAction:
    kind: Literal["start", "stop", "destroy"]
    instance_id: int
    at: float
    spec: ContainerSpec | None = None


class BidTooLow(Exception):
    """The create made a stopped, outbid instance (vast still answers with its id)."""

    def __init__(self, instance: Instance) -> None:
        super().__init__(instance.id)
        self.instance = instance


SOURCE_IP_ENV = "VASTSIM_SOURCE_IP"
"""The container's own loopback address, for its processes to bind to (simulator only)."""

GPUS_ENV = "VASTSIM_GPUS"
"""How many GPUs the container was rented with, all simulated (simulator only): there are no
devices to find, so the agent takes this count instead of looking for `/dev/nvidia<n>`."""

LOOPBACK_OCTET = 254  # each of a, b, c in 127.a.b.c runs 1..254
LOOPBACK_ADDRESSES = LOOPBACK_OCTET**3
LOOPBACK_STRIDE = 7_654_321  # how far an IP change moves (coprime with LOOPBACK_ADDRESSES)


def next_ip(ip: str) -> str:
    """The next address in the same /24 (wrapping, never .0 or .255)."""
    head, _, last = ip.rpartition(".")
    return f"{head}.{int(last) % 254 + 1}"


def loopback_ip(index: int) -> str:
    """The `index`-th per-instance loopback address, 127.a.b.c with a, b and c in 1..254: never
    127.0.0.1 (nor anything in 127.0.0.0/24, nor a .0 or .255), one address per index modulo
    254**3. An instance's first address is `loopback_ip(instance id)`."""
    n = index % LOOPBACK_ADDRESSES
    a, rest = divmod(n, LOOPBACK_OCTET * LOOPBACK_OCTET)
    b, c = divmod(rest, LOOPBACK_OCTET)
    return f"127.{a + 1}.{b + 1}.{c + 1}"


def gpu_env(count: int) -> dict[str, str]:
    """The GPU part of a container's environment: `VASTSIM_GPUS=<n>` (they are simulated) and,
    when there are any, the device ids `CUDA_VISIBLE_DEVICES=0,...,n-1` (numbered from 0 inside
    the container, as vast's containers see their GPUs), which Ray takes as the GPUs it may hand
    to tasks."""
    env = {GPUS_ENV: str(count)}
    if count > 0:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    return env


class Fleet:
    """Every instance of the account and the machinery that moves them through vast's statuses."""

    def __init__(
        self,
        *,
        market: Market,
        meter: Meter,
        runner: Runner,
        timing: Timing,
        start: float,
        first_instance_id: int = 20_000_001,
    ) -> None:
        self.market = market
        self.meter = meter
        self.runner = runner
        self.timing = timing
        self.start_time = start
        self.instances: dict[int, Instance] = {}
        self.gone: dict[int, Instance] = {}
        self.base_url: str | None = None
        self.hide_new_listings = 0
        # Images no registry has (a bad tag): Docker's pull fails at once and the instance
        # stays in `loading` with Docker's words, as vast shows it.
        self.missing_images: set[str] = set()
        self._ids = itertools.count(first_instance_id)
        self._seq = itertools.count()
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._actions: list[ContainerAction] = []
        self._waiting: list[int] = []
        self._up: set[int] = set()
        self._loopback_owner: dict[str, int] = {}  # loopback address -> live instance holding it
        for machine in market:
            self._schedule_host_traits(machine)

    # -- the event queue ----------------------------------------------------------------------

    def next_event_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def run_due(self, now: float) -> None:
        """Fire every event due by `now`, each at its own time, in time order."""
        while self._events and self._events[0][0] <= now:
            at, _, fire = heapq.heappop(self._events)
            fire(at)

    def take_actions(self) -> list[ContainerAction]:
        actions, self._actions = self._actions, []
        return actions

    def _push(self, at: float, fire: Callable[[float], None]) -> None:
        heapq.heappush(self._events, (at, next(self._seq), fire))

    def _at(self, at: float, inst: Instance, step: Callable[[Instance, float], None]) -> None:
        """A transition of `inst`, cancelled by any later user action (epoch) or destroy."""
        epoch = inst.epoch

        def fire(when: float) -> None:
            if inst.destroyed_at is None and inst.epoch == epoch:
                step(inst, when)

        self._push(at, fire)

    def _during_rental(
        self, at: float, inst: Instance, step: Callable[[Instance, float], None]
    ) -> None:
        """Something that happens to a rental unless it is destroyed first."""

        def fire(when: float) -> None:
            if inst.destroyed_at is None:
                step(inst, when)

        self._push(at, fire)

    def schedule(self, at: float, fire: Callable[[float], None]) -> None:
        """A fault at a time (fires at once when `at` is not in the future)."""
        self._push(at, fire)

    # -- user actions -------------------------------------------------------------------------

    def create(self, offer_id: int, request: CreateRequest, now: float) -> Instance:
        """Rent an offer. Raises `NoSuchAsk`; `BidTooLow` when the bid is under the floor."""
        instance_id = next(self._ids)
        bundle = self.market.take(offer_id, instance_id)
        machine = bundle.machine
        n = bundle.num_gpus
        machine.disk_used[instance_id] = request.disk
        compute = (
            request.bid_price if request.bid_price is not None else round(machine.dph_base * n, 6)
        )
        inst = Instance(
            id=instance_id,
            offer_id=offer_id,
            machine=machine,
            gpu_ids=bundle.gpu_ids,
            image=request.image,
            disk=request.disk,
            label=request.label,
            env=list(request.env),
            onstart=request.onstart,
            runtype=request.runtype,
            args=None if request.args is None else list(request.args),
            bid_price=request.bid_price,
            api_key=secrets.token_hex(32),
            created_at=now,
            compute_dph=compute,
            storage_dph=machine.storage_dph(request.disk),
            public_ip=(
                self._claim_loopback(instance_id, 0) if self.runner.loopback_ips else machine.ip
            ),
            template_hash_id=request.template_hash_id,
            jupyter_token=secrets.token_hex(32),
            hidden_listings=self.hide_new_listings,
        )
        self.instances[instance_id] = inst
        self.meter.open(instance_id, now, inst.storage_dph, None, inst.label)
        if request.bid_price is not None and request.bid_price < machine.bid_floor * n:
            self.outbid(inst, now, raise_floor=False)
            raise BidTooLow(inst)
        self._at(now + self.timing.provision, inst, self._to_created)
        return inst

    def stop(self, inst: Instance, now: float) -> None:
        """The stop call: carried out `timing.stop_delay` after it (at once without a delay);
        a second call while one is under way changes nothing."""
        if inst.intended_status == "stopped" and inst.actual_status == "stopped":
            return
        if inst.stop_at is not None:
            return
        delay = self.timing.stop_delay
        if delay <= 0:
            self._stop_now(inst, now)
            return
        inst.intended_status = "stopped"
        inst.next_state = "stopped"
        inst.stop_at = now + delay
        self._during_rental(inst.stop_at, inst, self._stop_due)

    def _stop_due(self, inst: Instance, now: float) -> None:
        if inst.stop_at is not None and now >= inst.stop_at:
            self._stop_now(inst, now)

    def _stop_now(self, inst: Instance, now: float) -> None:
        inst.stop_at = None
        self._halt(inst, now)
        self._mark_stopped(inst, now, None)

    def start(self, inst: Instance, now: float) -> None:
        if inst.stop_at is not None:
            # a start while the stop is still under way: the stop is called off, it runs on
            inst.stop_at = None
            inst.intended_status = "running"
            inst.next_state = "running"
            return
        if inst.intended_status == "running" and inst.actual_status in PENDING_STATUSES | {
            "scheduling"
        }:
            return
        inst.intended_status = "running"
        inst.next_state = "running"
        self._halt(inst, now)
        self._resume(inst, now)

    def reboot(self, inst: Instance, now: float) -> None:
        """Restart the container of a running instance (no effect otherwise)."""
        if inst.actual_status != "running":
            return
        inst.epoch += 1
        self._stop_container(inst, now)
        self._set_status(inst, "rebooting", now, None)
        self._at(now + self.timing.reboot, inst, self._to_running)

    def recycle(self, inst: Instance, now: float) -> None:
        """Destroy and recreate the container from a freshly pulled image, in place."""
        inst.intended_status = "running"
        inst.next_state = "running"
        self._halt(inst, now)
        if not self._acquire(inst):
            self._wait_for_gpus(inst, now)
            return
        self._set_status(inst, "recycling", now, None)
        self._at(now + self.timing.create, inst, lambda i, t: self._to_loading(i, t, fresh=True))

    def destroy(self, inst: Instance, now: float) -> None:
        self._halt(inst, now, container="destroy")
        inst.destroyed_at = now
        inst.intended_status = "stopped"
        inst.next_state = "unloaded"
        self.meter.close(inst.id, now)
        self.instances.pop(inst.id, None)
        self.gone[inst.id] = inst
        self._release_loopback(inst)
        inst.machine.disk_used.pop(inst.id, None)
        self._release_gpus(inst, now)

    def relabel(self, inst: Instance, label: str | None) -> None:
        inst.label = label
        self.meter.relabel(inst.id, label)

    def change_bid(self, inst: Instance, price: float | None, now: float) -> None:
        floor = inst.machine.bid_floor * inst.num_gpus
        inst.bid_price = floor if price is None else price
        inst.compute_dph = inst.bid_price
        self._bill(inst, now)
        if inst.outbid and inst.bid_price >= floor:
            inst.outbid = False
            self.start(inst, now)

    def container_exited(self, instance_id: int, now: float) -> None:
        """PID 1 exited by itself: vast starts the container again (a new boot)."""
        inst = self.instances.get(instance_id)
        if inst is None:
            return
        self._up.discard(instance_id)
        if inst.actual_status == "running" and inst.intended_status == "running":
            inst.status_msg = "container exited; restarting"
            self._at(now + max(self.timing.restart, MIN_RESTART), inst, self._restart)

    def container_up(self, instance_id: int) -> bool:
        """Whether the instance's container should be running right now."""
        return instance_id in self._up and instance_id in self.instances

    def should_run(self, instance_id: int, boot: int) -> bool:
        """Whether a queued start of this boot is still wanted."""
        inst = self.instances.get(instance_id)
        return inst is not None and instance_id in self._up and inst.boots == boot

    def visible(self, now: float) -> list[Instance]:
        """Instances a listing may show: live ones, and destroyed ones within the listing lag."""
        lagging = [
            inst
            for inst in self.gone.values()
            if inst.destroyed_at is not None
            and now < inst.destroyed_at + self.timing.destroy_list_lag
        ]
        return [*self.instances.values(), *lagging]

    def vacate(self, machine: Machine, now: float) -> None:
        """The outside tenant leaves the machine; waiting instances may now get their GPUs."""
        self.market.vacate(machine.machine_id)
        self._schedule_waiting(machine, now)

    # -- faults -------------------------------------------------------------------------------

    def exit_container(self, inst: Instance, now: float, code: int = 1) -> None:
        """The container exits and stays down: status `exited` (intended stays running)."""
        inst.epoch += 1
        self._stop_container(inst, now)
        self._set_status(inst, "exited", now, f"Exited ({code})")

    def go_offline(self, inst: Instance, now: float) -> None:
        inst.epoch += 1
        self._stop_container(inst, now)
        self._set_status(inst, "offline", now, None)

    def go_unknown(self, inst: Instance, now: float) -> None:
        """No heartbeat from the host: status `unknown`; the container itself keeps running."""
        inst.epoch += 1
        self._set_status(inst, "unknown", now, None)

    def heard_again(self, inst: Instance, now: float) -> None:
        """The host's heartbeat reaches vast again: an `unknown` instance is `running` once more.
        Its container never stopped, so nothing boots (a path cut that heals)."""
        if inst.actual_status == "unknown":
            kind = inst.runtype.split()[0] if inst.runtype.split() else "ssh"
            self._set_status(inst, "running", now, f"success, running {inst.image}/{kind}")

    def machine_offline(self, machine: Machine, now: float) -> None:
        machine.offline = True
        self.market.refresh(machine)
        for inst in self.on_machine(machine):
            if inst.actual_status not in ("stopped", "offline"):
                self.go_offline(inst, now)

    def change_ip(self, machine: Machine, now: float, new_ip: str | None = None) -> None:
        """The host's public IP changes (to `new_ip` when given); containers see it at their next
        boot. With per-instance loopback addresses each instance on the machine gets a new one of
        its own instead (`new_ip` then moves the machine's address in offers only), so no two
        live instances ever share an address."""
        machine.ip = new_ip or next_ip(machine.ip)
        for inst in self.on_machine(machine):
            if self.runner.loopback_ips:
                old = inst.public_ip
                self._release_loopback(inst)
                inst.ip_changes += 1
                inst.public_ip = self._claim_loopback(inst.id, inst.ip_changes, avoid=old)
            else:
                inst.public_ip = machine.ip

    def outbid(self, inst: Instance, now: float, *, raise_floor: bool = True) -> None:
        """A higher bid takes the GPUs: stopped, with intended/cur/next all `stopped`."""
        if raise_floor and inst.bid_price is not None:
            per_gpu = inst.bid_price / inst.num_gpus
            inst.machine.min_bid = max(inst.machine.bid_floor, round(per_gpu * 1.25 + 0.001, 6))
        self._halt(inst, now)
        inst.outbid = True
        self._mark_stopped(inst, now, "outbid")

    def on_machine(self, machine: Machine) -> list[Instance]:
        return [i for i in self.instances.values() if i.machine is machine]

    # -- per-instance loopback addresses ------------------------------------------------------

    def _claim_loopback(self, instance_id: int, changes: int, avoid: str = "") -> str:
        """The instance's address after `changes` IP changes: derived from its id, moved on past
        any address another live instance holds (and past `avoid`, the one it had)."""
        index = instance_id + changes * LOOPBACK_STRIDE
        while True:
            address = loopback_ip(index)
            if address != avoid and address not in self._loopback_owner:
                self._loopback_owner[address] = instance_id
                return address
            index += 1

    def _release_loopback(self, inst: Instance) -> None:
        if self._loopback_owner.get(inst.public_ip) == inst.id:
            del self._loopback_owner[inst.public_ip]

    # -- transitions --------------------------------------------------------------------------

    def _to_created(self, inst: Instance, now: float) -> None:
        failing = inst.machine.traits.oci_failure or inst.force_oci_failure
        self._set_status(inst, "created", now, OCI_ERROR if failing else None)
        if not failing:
            self._at(now + self.timing.create, inst, self._to_loading)

    def _to_loading(self, inst: Instance, now: float, *, fresh: bool = False) -> None:
        """Pull (unless the image is there and `fresh` is not asked) and start. The image is
        there when the host holds it, and always for an instance that has run before: a
        stopped instance keeps its disk, and the container on it, so a start pulls nothing
        even after the host dropped the image from its cache."""
        self._stop_container(inst, now)
        machine = inst.machine
        wait = self.timing.container_start
        on_disk = inst.first_running_at is not None
        if inst.image in self.missing_images and not on_disk:
            message = (
                f"Error response from daemon: manifest for {inst.image} not found: "
                "manifest unknown: manifest unknown"
            )
            self._set_status(inst, "loading", now, message)
            return
        if (inst.image in machine.cache or on_disk) and not fresh:
            message = f"Status: Image is up to date for {inst.image}"
        else:
            wait += self.market.image_size_gb(inst.image) * 1000.0 / machine.pull_speed_mbps
            message = f"{inst.image}: Pulling fs layer"
        self._set_status(inst, "loading", now, message)
        if not machine.traits.never_boots:
            self._at(now + wait, inst, self._to_running)

    def _to_running(self, inst: Instance, now: float) -> None:
        machine = inst.machine
        machine.cache.add(inst.image)
        if not inst.ports:
            wanted = requested_ports(inst.env, inst.runtype)
            inst.ports = self.runner.allocate_ports(inst.id, wanted)
        first = inst.first_running_at is None
        if first:
            inst.first_running_at = now
        inst.running_since = now
        inst.cur_state = "running"
        kind = inst.runtype.split()[0] if inst.runtype.split() else "ssh"
        self._set_status(inst, "running", now, f"success, running {inst.image}/{kind}")
        self._boot(inst, now)
        if first:
            self._schedule_rental_traits(inst, now)

    def _restart(self, inst: Instance, now: float) -> None:
        if inst.actual_status == "running" and inst.id not in self._up:
            inst.status_msg = f"success, running {inst.image}"
            self._boot(inst, now)

    def _boot(self, inst: Instance, now: float) -> None:
        inst.boots += 1
        self._up.add(inst.id)
        self._actions.append(ContainerAction("start", inst.id, now, self.container_spec(inst)))

    def container_spec(self, inst: Instance) -> ContainerSpec:
        """vast's container environment for the instance's current boot."""
        env = dict(inst.user_env)
        env.update(
            {
                "CONTAINER_ID": str(inst.id),
                "VAST_CONTAINERLABEL": f"C.{inst.id}",
                "CONTAINER_API_KEY": inst.api_key,
                "PUBLIC_IPADDR": inst.public_ip,
                "GPU_COUNT": str(inst.num_gpus),
                "VASTSIM_BOOT": str(inst.boots),
            }
        )
        for key, port in inst.ports.items():
            number, _, proto = key.partition("/")
            env[f"VAST_{proto.upper() or 'TCP'}_PORT_{number}"] = str(port)
        if self.base_url:
            env["VAST_URL"] = self.base_url
        if self.runner.loopback_ips:
            env[SOURCE_IP_ENV] = inst.public_ip
        env.update(gpu_env(inst.num_gpus))
        return ContainerSpec(
            instance_id=inst.id,
            boot=inst.boots,
            image=inst.image,
            runtype=inst.runtype,
            args=None if inst.args is None else tuple(inst.args),
            onstart=inst.onstart,
            env=env,
            ports=dict(inst.ports),
            public_ip=inst.public_ip,
            label=inst.label,
            has_ray=inst.image not in self.market.images_without_ray,
        )

    # -- helpers ------------------------------------------------------------------------------

    def _set_status(self, inst: Instance, status: str, now: float, message: str | None) -> None:
        inst.actual_status = status
        inst.status_msg = message
        self._bill(inst, now)

    def _bill(self, inst: Instance, now: float) -> None:
        running = inst.actual_status == "running"
        rate = inst.dph_total if running else inst.storage_dph
        self.meter.change(inst.id, now, rate, inst.actual_status)

    def _halt(
        self, inst: Instance, now: float, container: Literal["stop", "destroy"] = "stop"
    ) -> None:
        """Cancel pending transitions and take the container down."""
        inst.epoch += 1
        if inst.id in self._waiting:
            self._waiting.remove(inst.id)
        if container == "destroy":
            self._up.discard(inst.id)
            self._actions.append(ContainerAction("destroy", inst.id, now))
        else:
            self._stop_container(inst, now)

    def _stop_container(self, inst: Instance, now: float) -> None:
        if inst.id in self._up:
            self._up.discard(inst.id)
            self._actions.append(ContainerAction("stop", inst.id, now))

    def _mark_stopped(self, inst: Instance, now: float, message: str | None) -> None:
        inst.intended_status = "stopped"
        inst.cur_state = "stopped"
        inst.next_state = "stopped"
        self._set_status(inst, "stopped", now, message)
        self._release_gpus(inst, now)

    def _resume(self, inst: Instance, now: float) -> None:
        if self._acquire(inst):
            inst.cur_state = "running"
            self._to_loading(inst, now)
        else:
            self._wait_for_gpus(inst, now)

    def _wait_for_gpus(self, inst: Instance, now: float) -> None:
        self._set_status(inst, "scheduling", now, "Waiting for GPUs to become available")
        if inst.id not in self._waiting:
            self._waiting.append(inst.id)

    def _acquire(self, inst: Instance) -> bool:
        machine = inst.machine
        if machine.offline:
            return False
        if inst.outbid and (inst.bid_price or 0.0) < machine.bid_floor * inst.num_gpus:
            return False
        if inst.holds_gpus:
            return True
        if self.market.assign(machine, inst.gpu_ids, inst.id):
            inst.holds_gpus = True
            return True
        return False

    def _release_gpus(self, inst: Instance, now: float) -> None:
        if inst.holds_gpus:
            inst.holds_gpus = False
            self.market.release(inst.machine, inst.id)
            self._schedule_waiting(inst.machine, now)

    def _schedule_waiting(self, machine: Machine, now: float) -> None:
        for instance_id in list(self._waiting):
            inst = self.instances.get(instance_id)
            if inst is None or inst.machine is not machine or not self._acquire(inst):
                continue
            self._waiting.remove(instance_id)
            inst.epoch += 1
            inst.cur_state = "running"
            self._to_loading(inst, now)

    def _schedule_host_traits(self, machine: Machine) -> None:
        traits = machine.traits
        if traits.offline_at is not None:
            self._push(
                self.start_time + traits.offline_at, lambda t: self.machine_offline(machine, t)
            )
        if traits.ip_change_at is not None:
            self._push(self.start_time + traits.ip_change_at, lambda t: self.change_ip(machine, t))
        if traits.outbid_at is not None:

            def outbid_all(when: float) -> None:
                for inst in self.on_machine(machine):
                    if inst.is_bid and not inst.outbid:
                        self.outbid(inst, when)

            self._push(self.start_time + traits.outbid_at, outbid_all)

    def _schedule_rental_traits(self, inst: Instance, now: float) -> None:
        traits = inst.machine.traits
        if traits.offline_after is not None:
            self._during_rental(
                now + traits.offline_after, inst, lambda i, t: self.machine_offline(i.machine, t)
            )
        if traits.ip_change_after is not None:
            self._during_rental(
                now + traits.ip_change_after, inst, lambda i, t: self.change_ip(i.machine, t)
            )
        if traits.outbid_after is not None and inst.is_bid:
            self._during_rental(now + traits.outbid_after, inst, self.outbid)

    def set_traits(self, machine: Machine, **changes: bool) -> None:
        machine.traits = dataclasses.replace(machine.traits, **changes)
