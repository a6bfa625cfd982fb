"""The head `up` starts is a whole Ray head that tells Ray users the truth (issue 24).

With real Ray on the embedded simulator:

- `ray job submit` against the dashboard's Jobs API runs a job whose task lands on a worker, and
  its logs come back; the dashboard answers with the cluster's Ray token and refuses without it
  (or with another);
- while ray-vast rents a GPU worker for a driver's `num_gpus=1` task, `ray status` lists it as
  pending (ray-vast reports its launches to the GCS as Ray's autoscaler v2 does) and the driver
  prints no "No available node types" error (the head runs without Ray's own monitor, which
  knows none of ray-vast's node types);
- a demand no node type can serve is among `ray status`'s pending demands, and the autoscaling
  state the GCS holds from ray-vast lists it as infeasible (Ray 2.60's `ray status` does not
  print that field yet: `autoscaler/v2/schema.py`, "we don't show infeasible requests").
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import httpx
import pytest

from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import RAY, UpCluster, local_sim
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

JOB = textwrap.dedent(
    """
    import os, ray
    ray.init()
    where = ray.get(ray.remote(num_cpus=1)(lambda: os.environ["CONTAINER_ID"]).remote())
    print("JOB RAN ON", where)
    """
)


def test_ray_job_submit_runs_a_job_on_a_worker_and_its_logs_come_back(upped: UpCluster) -> None:
    up = upped()
    submitted = subprocess.run(
        [RAY, "job", "submit", "--address", up.dashboard(), "--", sys.executable, "-c", JOB],
        env=up.ray_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, f"{said}\n{up.said()}"
    assert "JOB RAN ON " in said and "succeeded" in said, said
    ran_on = said.split("JOB RAN ON ", 1)[1].split()[0]
    assert ran_on in {str(i["vast_id"]) for i in up.serving("local-sim")}, (ran_on, said)

    # the worker Ray runs is no longer pending, and the extra candidate that lost its slot
    # (candidate_factor 2) is no failure (a clean clone's `ray status` said both)
    def told_true() -> str | None:
        shown = up.ray_status()
        text = shown.stdout if shown is not None else ""
        return text if "(no pending nodes)" in text and "(no failures)" in text else None

    wait_for(told_true, 60, "ray status without a pending worker or a failure", every=1)
    # and the worker's Ray exports Ray's metrics (ray[default]'s metrics agent)
    shown = subprocess.run(
        [sys.executable, "-c", METRICS_PORTS, up.address()],
        env=up.ray_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    exports = [line.split()[1:] for line in shown.stdout.splitlines() if line.startswith("AT ")]
    assert exports, shown.stdout + shown.stderr
    for host, port in exports:
        metrics = httpx.get(f"http://{host}:{port}/metrics", timeout=10)
        assert metrics.status_code == 200 and "ray_" in metrics.text, (host, port)


METRICS_PORTS = textwrap.dedent(
    """
    import sys, ray
    ray.init(address=sys.argv[1], log_to_driver=False)
    for node in ray.nodes():
        if node["Alive"] and node.get("Labels", {}).get("rv_node_type"):
            print("AT", node["NodeManagerAddress"], node["MetricsExportPort"])
    """
)


def test_the_dashboard_answers_with_the_token_and_refuses_without_it(upped: UpCluster) -> None:
    up = upped()
    token = up.token().read_text().strip()
    url = f"{up.dashboard()}/api/version"
    refused = ({}, {"Authorization": "Bearer " + "0" * len(token)}, {"Authorization": token})
    for headers in refused:  # no token, a forged one, the token without its scheme
        refusal = httpx.get(url, headers=headers, timeout=10).status_code
        assert refusal in {401, 403}, (headers, refusal)  # no credentials / wrong ones
    shown = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert shown.status_code == 200 and shown.json()["ray_version"], shown.text
    jobs = httpx.get(f"{up.dashboard()}/api/jobs/", timeout=10)
    assert jobs.status_code in {401, 403}  # the Jobs API too: nobody submits without the token


GPU_DRIVER = textwrap.dedent(
    """
    import os, ray
    ray.init(address=os.environ["ADDRESS"])
    where = ray.remote(num_gpus=1)(lambda: os.environ["CONTAINER_ID"])
    print("GPU TASK ON", ray.get(where.remote()))
    """
)


def _python(script: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`script` in a Python of its own, its output kept."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


PENDING_IN_RAY_STATUS = textwrap.dedent(
    """
    import os, sys, time
    from ray.autoscaler.v2.sdk import get_cluster_status
    from ray.autoscaler.v2.utils import ClusterStatusFormatter
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            text = ClusterStatusFormatter.format(get_cluster_status(os.environ["ADDRESS"]))
        except Exception:
            text = ""
        pending = text.split("Pending:", 1)[1].split("Recent failures", 1)[0] if text else ""
        if " gpu," in pending:
            print(text)
            sys.exit(0)
        time.sleep(0.05)
    sys.exit(1)
    """
)


def test_ray_status_lists_the_gpu_worker_being_rented_and_no_infeasible_error(
    upped: UpCluster,
) -> None:
    spec = local_sim()
    up = upped(spec)
    env = {**up.ray_env(spec.name), "ADDRESS": up.address(spec.name)}
    # `ray status`'s own code (Ray's GCS client and formatter), looking every 50 ms: the gpu
    # worker is pending for only the seconds from its rental until its Ray joins, and a `ray
    # status` process takes more than a second to start (looking every second missed it)
    watcher, driver = (_python(script, env) for script in (PENDING_IN_RAY_STATUS, GPU_DRIVER))
    try:
        status, _ = watcher.communicate(timeout=150)
        assert watcher.returncode == 0, (
            f"the gpu worker was never pending in `ray status`:\n{status}"
        )
        out, _ = driver.communicate(timeout=300)
    finally:
        for proc in (watcher, driver):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert "GPU TASK ON " in out, f"{out}\n{up.said()}"
    assert "No available node types" not in out, out
    assert "(ray-vast)" in status or "launching" in status, status


INFEASIBLE_STATE = textwrap.dedent(
    """
    import os
    from ray._raylet import GcsClient
    from ray.core.generated import autoscaler_pb2
    reply = GcsClient(address=os.environ["ADDRESS"]).get_cluster_status()
    state = autoscaler_pb2.GetClusterStatusReply.FromString(reply).autoscaling_state
    for r in state.infeasible_resource_requests:
        print("INFEASIBLE", dict(r.resources_bundle))
    """
)


# Ray's words (the shape's keys in the order of Ray's protobuf map, which is not fixed)
INFEASIBLE_SAID = re.compile(
    r"No available node types can fulfill resource requests "
    r"\{('TPU': 1.0, 'CPU': 1.0|'CPU': 1.0, 'TPU': 1.0)\}\*1\. "
    r"Add suitable node types to this cluster to resolve this issue\."
)


def test_a_demand_no_node_type_serves_is_pending_in_ray_status_and_infeasible_in_the_gcs(
    upped: UpCluster,
) -> None:
    spec = local_sim()
    up = upped(spec)
    env = {**up.ray_env(spec.name), "ADDRESS": up.address(spec.name)}
    ask = "import os, ray; ray.init(address=os.environ['ADDRESS']); "
    ask += "ray.remote(resources={'TPU': 1})(lambda: 1).remote(); import time; time.sleep(600)"
    said_to_driver = up.state.parent / "tpu-driver.out"
    with said_to_driver.open("w") as out:
        driver = subprocess.Popen(
            [sys.executable, "-c", ask], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:

        def listed() -> str | None:
            shown = up.ray_status(spec.name)
            return shown.stdout if shown is not None and "'TPU': 1.0" in shown.stdout else None

        wait_for(listed, 120, "the TPU demand in `ray status`", every=1)

        def told() -> str | None:
            read = subprocess.run(
                [sys.executable, "-c", INFEASIBLE_STATE],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            return read.stdout if "'TPU': 1.0" in read.stdout else None

        assert "INFEASIBLE" in wait_for(told, 60, "ray-vast's infeasible report", every=1)
        said = [e for e in up.ledger() if e["class"] == "infeasible_demand"]
        assert said and "TPU" in said[0]["message"], said

        # the driver is told, as Ray's autoscaler tells it (Ray's own event logger and log
        # monitor), that no node type can serve the TPU demand
        def driver_told() -> bool:
            return INFEASIBLE_SAID.search(said_to_driver.read_text()) is not None

        wait_for(driver_told, 60, "the driver told the TPU demand is infeasible", every=0.5)
    finally:
        driver.kill()
        driver.wait()
