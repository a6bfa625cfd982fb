"""A GPU task on the simulator, as on vast (issue 15).

`ray-vast up examples/clusters/local-sim.yaml` keeps its one `cpu` worker, which advertises no GPU
although its offer has one (the node type declares `GPU: 0`). A driver's `@ray.remote(num_gpus=1)`
task is Ray's demand for a GPU, which only the `gpu` node type fits: ray-vast rents a worker of it,
whose container the simulator tells it has one simulated GPU (`VASTSIM_GPUS=1`,
`CUDA_VISIBLE_DEVICES=0`); its Ray joins with `GPU: 1` and the task runs there, on the fake device
id Ray hands it.

Real processes end to end: the embedded simulator's containers run the real bootloader and agent,
which start a real Ray worker against the real Ray head of `up`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from typing import Any

import pytest

from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import UpCluster, local_sim
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

ADDRESS = "127.0.0.1:6380"  # local-sim's Ray head

NODES = textwrap.dedent(
    f"""
    import json, ray
    ray.init(address="{ADDRESS}", log_to_driver=False)
    for node in ray.nodes():
        if node["Alive"] and node.get("Labels", {{}}).get("rv_node_type"):
            shown = {{"labels": node["Labels"], "resources": node["Resources"]}}
            print("NODE", json.dumps({{"id": node["NodeID"], **shown}}))
    """
)

GPU_TASK = textwrap.dedent(
    f"""
    import json, os, ray
    ray.init(address="{ADDRESS}", log_to_driver=False)

    @ray.remote(num_gpus=1)
    def where():
        context = ray.get_runtime_context()
        return {{
            "instance": os.environ["CONTAINER_ID"],
            "node_type": os.environ.get("RAY_NODE_TYPE_NAME"),
            "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "node": context.get_node_id(),
        }}

    print("RAN", json.dumps(ray.get(where.remote(), timeout=float(os.environ["WAIT"]))))
    """
)


def run_driver(
    script: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "WAIT": str(timeout - 30)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def workers(env: dict[str, str], address: str = ADDRESS) -> list[dict[str, Any]]:
    """ray-vast's live workers in Ray: labels and resources."""
    shown = run_driver(NODES.replace(ADDRESS, address), env, 90)
    return [json.loads(line[5:]) for line in shown.stdout.splitlines() if line.startswith("NODE ")]


def of_type(nodes: list[dict[str, Any]], node_type: str) -> list[dict[str, Any]]:
    return [n for n in nodes if n["labels"].get("rv_node_type") == node_type]


def test_a_gpu_task_rents_a_simulated_gpu_worker_and_runs_on_it(upped: UpCluster) -> None:
    up = upped()
    ray_env = up.ray_env()
    try:
        cpu = wait_for(lambda: of_type(workers(ray_env), "cpu"), 180, "a cpu worker", every=2)
    except AssertionError:
        raise AssertionError(up.said()) from None
    # the cpu node type declares CPU 2 and GPU 0: its worker's Ray says exactly that,
    # although the simulator gave its container the offer's GPU
    (cpu_worker,) = cpu
    assert cpu_worker["resources"]["CPU"] == 2.0, cpu_worker
    assert "GPU" not in cpu_worker["resources"], cpu_worker

    # Ray's demand for a GPU: only the gpu node type fits it
    task = subprocess.Popen(
        [sys.executable, "-c", GPU_TASK],
        env={**ray_env, "WAIT": "240"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = task.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        task.kill()
        out, err = task.communicate()
    nodes = workers(ray_env)
    gpu = of_type(nodes, "gpu")
    assert "RAN " in out, f"{out}\n{err[-3000:]}\nRay's workers: {nodes}\n{up.said()}"
    ran = json.loads(out.split("RAN ", 1)[1])
    # a worker of the gpu node type joined Ray with GPU 1 (and the declared CPU 2)...
    assert len(gpu) == 1, nodes
    assert gpu[0]["resources"]["GPU"] == 1.0 and gpu[0]["resources"]["CPU"] == 2.0, gpu
    # ... and the task ran there, on the fake device id Ray handed it
    assert ran["node_type"] == "gpu", ran
    assert ran["node"] == gpu[0]["id"], (ran, gpu)
    assert ran["cuda"] == "0" and ran["gpu_ids"] == ["0"], ran
    assert len(of_type(nodes, "cpu")) == 1, nodes  # and no second cpu worker for it
    assert "watch stopped" in up.stop()
    down = up.down()
    assert down.returncode == 0, down.stdout + down.stderr
    up.nothing_left()


ACCELERATOR = "GeForce-RTX-3060"  # Ray's name of "NVIDIA GeForce RTX 3060" (vast: "RTX 3060")

ACCELERATOR_TASKS = textwrap.dedent(
    f"""
    import json, os, ray
    ray.init(address="{ADDRESS}", log_to_driver=False)

    @ray.remote(num_gpus=1, accelerator_type="{ACCELERATOR}")
    def by_type():
        return ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=1, label_selector={{"ray.io/accelerator-type": "{ACCELERATOR}"}})
    def by_label():
        return ray.get_runtime_context().get_node_id()

    wait = float(os.environ["WAIT"])
    print("RAN", json.dumps([ray.get(by_type.remote(), timeout=wait),
                             ray.get(by_label.remote(), timeout=wait)]))
    """
)


def test_rays_accelerator_type_and_its_label_rent_the_card_and_run_there(
    upped: UpCluster,
) -> None:
    """Issue 24: `accelerator_type=` and `label_selector={"ray.io/accelerator-type": ...}`
    rented nothing (the spec refused ray.io/ labels and no shape carried Ray's name of the
    card). A gpu node type that filters `gpu_name: {eq: RTX 3060}` is Ray's GeForce-RTX-3060:
    its worker advertises the label and the `accelerator_type:` resource Ray gives such a node,
    and both tasks run on it."""
    spec = local_sim(min_workers=0, max_workers=1)
    gpu_filters = "          dph_total: {lte: 0.30}   # 2 cpu + 1 gpu workers"
    assert gpu_filters in spec.text
    named = "          gpu_name: {eq: RTX 3060}\n" + gpu_filters
    spec = replace(spec, text=spec.text.replace(gpu_filters, named))
    up = upped(spec)
    ray_env, address = up.ray_env(spec.name), up.address(spec.name)
    done = run_driver(ACCELERATOR_TASKS.replace(ADDRESS, address), ray_env, 300)
    nodes = workers(ray_env, address)
    assert "RAN " in done.stdout, f"{done.stdout}\n{done.stderr[-3000:]}\n{nodes}\n{up.said()}"
    ran = json.loads(done.stdout.split("RAN ", 1)[1])
    gpu = of_type(nodes, "gpu")
    assert len(gpu) == 1, gpu
    assert gpu[0]["labels"]["ray.io/accelerator-type"] == ACCELERATOR, gpu
    assert gpu[0]["resources"][f"accelerator_type:{ACCELERATOR}"] == 1.0, gpu
    assert ran == [gpu[0]["id"], gpu[0]["id"]], (ran, gpu)
