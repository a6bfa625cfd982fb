"""GPUs and declared resources: what a worker's Ray advertises (issue 15).

- The agent counts GPUs itself (the NVIDIA devices in /dev), unless the simulator says the
  container's GPUs are simulated (`VASTSIM_GPUS`): then it takes that count.
- A node type's declared `resources: {CPU, GPU}` come in the enrollment answer (`ray.num_cpus`,
  `ray.num_gpus`) and are what `ray start` gets (`--num-cpus`, `--num-gpus`); what is not declared
  is the agent's own count.
- For real: a served vastsim whose containers run the real bootloader and agent (a fake `ray`
  records its argv), rented through the head's launcher, for a node type that declares both, one
  that declares `GPU: 0`, and one that declares nothing.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent import cores, lifecycle, raynode
from agent.commands import Log, StartRay
from agent.events import EnrollAnswered, Started
from agent.state import Timings, initial
from reconciler.head import answers, messages
from reconciler.model.spec import ClusterSpec
from reconciler.spec.text import spec_yaml
from tests.specs import load_spec
from tests.waiting import wait_for

from ..head.harness import CLUSTER, IMAGE, WATCHDOGS, HeadWorld, head_world
from ..head.schemas import assert_valid
from .conftest import WorldFactory
from .test_endings import container_log, started_ray

FIXTURES = Path(__file__).parent / "fixtures"
BOOT = 20.0


# --- the agent's count -----------------------------------------------------------------------


def test_the_simulators_gpus_are_taken_as_it_says(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "null"):
        (dev / name).touch()
    # a real host: the NVIDIA devices (here one)
    assert cores.detect_gpus({}, dev) == cores.GpuCount(1, f"NVIDIA devices in {dev}")
    # the simulator says its GPUs are simulated: its count, whatever /dev holds
    said = cores.detect_gpus({"VASTSIM_GPUS": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, dev)
    assert said == cores.GpuCount(2, "simulated by vastsim (VASTSIM_GPUS=2)")
    assert cores.detect_gpus({"VASTSIM_GPUS": "0"}, dev).gpus == 0
    # nonsense is no count: the devices, and the log says why
    for bad in ("two", "-1", "1.5", "²", ""):
        wrong = cores.detect_gpus({"VASTSIM_GPUS": bad}, dev)
        assert wrong.gpus == 1 and "is no count" in wrong.source, bad
    assert cores.detect_gpus({}, FIXTURES / "no-such-dev").gpus == 0


# --- the machine's decision: what Ray is started with ----------------------------------------


def start_ray(ray: Mapping[str, Any], *, cpus: int = 8, gpus: int = 1) -> tuple[StartRay, str]:
    """The StartRay of a candidate with `cpus`/`gpus` counted, enrolled with this `ray`."""
    state = initial(Timings(), started=0.0, record_id="i7")
    state, _ = lifecycle.step(state, Started(cpus=cpus, gpus=gpus), 0.0)
    answer = {"record_id": "i7", "slot_id": "q1s1", "ray": dict(ray), "thresholds": {}}
    _, commands = lifecycle.step(state, EnrollAnswered(200, answer), 1.0)
    [start] = [c for c in commands if isinstance(c, StartRay)]
    logged = " | ".join(c.message for c in commands if isinstance(c, Log))
    return start, logged


def test_ray_advertises_what_the_node_type_declares_else_the_machines_count() -> None:
    start, logged = start_ray({"num_cpus": 2, "num_gpus": 0})
    assert (start.cpus, start.gpus) == (2, 0)
    assert "Ray advertises 2 CPUs (the machine has 8) and 0 GPUs (the machine has 1)" in logged
    start, logged = start_ray({"num_gpus": 1}, gpus=0)
    assert (start.cpus, start.gpus) == (8, 1)  # CPU undeclared: the machine's 8
    assert "1 GPUs (the machine has 0)" in logged and "CPUs" not in logged
    start, logged = start_ray({})
    assert (start.cpus, start.gpus) == (8, 1)
    assert "advertises" not in logged
    start, logged = start_ray({"num_cpus": 8, "num_gpus": 1})  # as counted: nothing to say
    assert (start.cpus, start.gpus) == (8, 1) and "advertises" not in logged
    # what is not a whole number of at least 0 is no declaration
    for bad in (-1, 1.5, "2", True, None):
        start, _ = start_ray({"num_cpus": bad, "num_gpus": bad})
        assert (start.cpus, start.gpus) == (8, 1), bad


RAY: dict[str, Any] = {
    "head_address": "127.0.0.1:6390",
    "node_ip_address": "127.1.2.3",
    "node_manager_port": 40000,
    "object_manager_port": 40001,
    "worker_ports": [40002],
    "resources": {"rv-slot-q1s1": 1.0, "special": 2.0},
    "labels": {"rv_slot": "q1s1"},
    "env": {},
}


def flags(argv: tuple[str, ...] | list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def test_the_ray_start_argv_carries_the_counts_and_the_custom_resources() -> None:
    start, _ = start_ray({**RAY, "num_cpus": 2, "num_gpus": 1}, cpus=16, gpus=0)
    plan = raynode.ray_plan(
        ["ray"], RAY, cpus=start.cpus, gpus=start.gpus, token_path="/t", base_env={}
    )
    shown = flags(plan.argv)
    assert (shown["--num-cpus"], shown["--num-gpus"]) == ("2", "1")
    # CPU and GPU are flags of their own; custom resources go in --resources, never CPU or GPU
    assert json.loads(shown["--resources"]) == {"rv-slot-q1s1": 1.0, "special": 2.0}
    # the simulator's fake device ids reach Ray (it hands them to GPU tasks)
    env = {"CUDA_VISIBLE_DEVICES": "0", "VASTSIM_GPUS": "1", "RV_JOIN_TOKEN": "secret"}
    plan = raynode.ray_plan(["ray"], RAY, cpus=2, gpus=1, token_path="/t", base_env=env)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "0" and "RV_JOIN_TOKEN" not in plan.env


def test_a_container_with_its_own_tmpdir_starts_ray_with_its_temp_dir_there() -> None:
    """Ray's temp dir is the head's path unless the node names one: in vastsim's containers (one
    machine, one /tmp) three raylets started at once shared a session directory and one never
    registered. A container told its own TMPDIR keeps Ray there; without one (vast's usual
    container, whose /tmp is its own) Ray decides, as before."""
    own = raynode.ray_plan(
        ["ray"], RAY, cpus=2, gpus=0, token_path="/t", base_env={"TMPDIR": "/tmp/c7"}
    )
    assert flags(own.argv)["--temp-dir"] == "/tmp/c7/ray"
    plain = raynode.ray_plan(["ray"], RAY, cpus=2, gpus=0, token_path="/t", base_env={})
    assert "--temp-dir" not in flags(plain.argv)


# --- the head's answer -----------------------------------------------------------------------

NODE_TYPES = """\
gpu:
  min_workers: 0
  max_workers: 2
  image: {image}
  disk_gb: 10
  offer: {{filters: {{num_gpus: {{eq: 1}}}}}}
  resources: {{CPU: 3, GPU: 1, special: 2}}
cpu:
  min_workers: 0
  max_workers: 2
  image: {image}
  disk_gb: 10
  offer: {{filters: {{num_gpus: {{eq: 1}}}}}}
  resources: {{GPU: 0}}
counted:
  min_workers: 0
  max_workers: 2
  image: {image}
  disk_gb: 10
"""


def gpu_spec() -> ClusterSpec:
    body = textwrap.dedent(
        """\
        provider: {type: vastsim}
        head: {address: 127.0.0.1, ray_port: 6390}
        max_dollars_per_hour: 100
        testing: {allow_short_thresholds: true}
        node_types:
        """
    )
    body += textwrap.indent(NODE_TYPES.format(image=IMAGE), "  ")
    body += "watchdogs:\n" + textwrap.indent(WATCHDOGS, "  ")
    return load_spec(spec_yaml(CLUSTER, body))


def test_declared_counts_are_whole_numbers_of_what_is_declared() -> None:
    assert answers.declared_counts({"CPU": 2.0, "GPU": 0.0, "memory": 1e9}) == {
        "num_cpus": 2,
        "num_gpus": 0,
    }
    assert answers.declared_counts({"CPU": 2.5}) == {"num_cpus": 2}  # `ray start` takes ints
    assert answers.declared_counts({"special": 1.0}) == {}
    spec = gpu_spec()
    assert dict(spec.node_types["cpu"].declared_resources) == {"GPU": 0.0}
    assert "GPU" not in spec.node_types["cpu"].shape.resources  # the shape omits a 0


def test_the_enrollment_answer_says_the_declared_counts(tmp_path: Path) -> None:
    with head_world(tmp_path, spec=gpu_spec()) as world:
        for node_type, expected in (
            ("gpu", {"num_cpus": 3, "num_gpus": 1}),
            ("cpu", {"num_gpus": 0}),
            ("counted", {}),
        ):
            rented = world.rent(world.place(slots=1, node_type=node_type), node_type=node_type)
            reply = world.enroll(rented)
            assert reply.status == 200, reply.doc
            assert_valid(messages.ENROLL_RESPONSE, reply.doc)
            ray = reply.doc["ray"]
            assert {k: ray[k] for k in ("num_cpus", "num_gpus") if k in ray} == expected
            if node_type == "gpu":  # custom keys of resources: go with the other resources
                assert ray["resources"]["special"] == 2.0


# --- for real: the simulator's GPUs, the agent's count, Ray's argv --------------------------


def test_a_simulated_gpu_worker_enrolls_with_its_gpus_and_ray_advertises_the_declared(
    agent_world: WorldFactory,
) -> None:
    world: HeadWorld = agent_world(spec=gpu_spec())
    machine_cpus = min(len(os.sched_getaffinity(0)), os.cpu_count() or 1)
    for node_type, cpus, gpus in (("gpu", 3, 1), ("cpu", machine_cpus, 0), ("counted", None, 1)):
        rented = world.rent(world.place(slots=1, node_type=node_type), node_type=node_type)
        argv = started_ray(world, rented)["argv"]
        shown = flags(argv)
        log = container_log(world, rented)
        # every offer of this market has 1 GPU: the simulator says so, the agent counts it
        assert "1 GPUs (simulated by vastsim (VASTSIM_GPUS=1))" in log, log
        enrolled = wait_for(
            lambda r=rented: [e for e in world.ledger("enrolled") if e.instance == r.vast_id],
            BOOT,
            "the enrollment in the ledger",
        )
        assert enrolled[0].data["gpus"] == 1  # machine.gpus of the enroll request
        assert shown["--num-gpus"] == str(gpus), (node_type, argv)
        if cpus is not None:
            assert shown["--num-cpus"] == str(cpus), (node_type, argv)
        else:  # undeclared: the agent's own count, the one it enrolled with
            assert shown["--num-cpus"] == str(enrolled[0].data["cpus"])


def test_rays_own_labels_are_set_as_an_autoscaler_sets_them_not_by_flag() -> None:
    """`ray start --labels` refuses ray.io/ keys (Ray owns them); the accelerator type Ray
    would have read from the card goes through RAY_OVERRIDE_LABELS, the variable Ray's
    autoscalers set a node's labels with."""
    ray = {**RAY, "labels": {"rv_slot": "q1s1", "ray.io/accelerator-type": "A100"}}
    plan = raynode.ray_plan(["ray"], ray, cpus=2, gpus=1, token_path="/t", base_env={})
    assert flags(plan.argv)["--labels"] == "rv_slot=q1s1"
    assert json.loads(plan.env["RAY_OVERRIDE_LABELS"]) == {"ray.io/accelerator-type": "A100"}
    plain = raynode.ray_plan(["ray"], RAY, cpus=2, gpus=1, token_path="/t", base_env={})
    assert "RAY_OVERRIDE_LABELS" not in plain.env
