"""Ray-native autoscaling end to end, with real Ray on the embedded simulator (issue 15).

Each test runs its own `ray-vast up` (the fixture `upped`) on copies of
`examples/clusters/local-sim.yaml` on free ports, with a state directory of its own, and always
`down` at the end. A driver connects to the cluster's real Ray head and asks for work; ray-vast
reads that demand from Ray's GCS and packs it as Ray's own scheduler would:

- a STRICT_SPREAD placement group of two one-CPU bundles rents two workers, one bundle on each;
- `ray.autoscaler.sdk.request_resources(num_cpus=4)` rents two 2-core workers, no task submitted
  (the head runs Ray's autoscaler v1, which keeps the request in the GCS's key-value store: the
  first run of this test found ray-vast reading only v2's place for it, and renting nothing);
- a task no node type can run (`{TPU: 1}`) rents nothing, and `status` says so in Ray's words;
- once the work is done, idle workers are drained through Ray and ended down to `min_workers`;
- two clusters in one `up` (a spec directory), each with its own Ray head, each scaling for its
  own driver's tasks only.

The simulator's workers have 2 cores (this machine's). On 2 cores a Ray node starting beside
others can time out (its agent reports `ray_exited` and the worker ends): a later slot may then
replace a worker that ended, never add one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest

from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import Peak, UpCluster, local_sim
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
    # a whole cluster each on 2 cores: Ray nodes that time out starting are replaced, which
    # can take minutes under load (the idle test also waits out its idle windows)
    pytest.mark.timeout(600),
]

# Short idle windows for the scale-down test (allowed on the simulator only).
IDLE_WINDOWS = """\
  watchdogs:
    idle_stop_after_seconds: 15
    idle_destroy_after_seconds: 30
  cadences:
    idle_scan_seconds: 2
    auto_stop_seconds: 2
    auto_destroy_seconds: 2
  testing: {allow_short_thresholds: true}
"""
AUTOSCALER_DRAIN_IDLE = 4  # NodeDeathInfo.Reason


# --- 1. a STRICT_SPREAD placement group ---------------------------------------------------------

STRICT_SPREAD = textwrap.dedent(
    """
    import json, sys, ray
    from ray.util.placement_group import placement_group, placement_group_table
    ray.init(address=sys.argv[1], log_to_driver=False)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
    ready = pg.wait(timeout_seconds=480)
    table = placement_group_table(pg)
    labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n["Alive"]}
    placed = {str(b): labels.get(node, {}) for b, node in table["bundles_to_node_id"].items()}
    print("PG", json.dumps({"ready": ready, "state": table["state"], "bundles": placed}))
    """
)


def test_a_strict_spread_group_of_two_bundles_rents_two_nodes(upped: UpCluster) -> None:
    up = upped(local_sim(max_workers=3))
    assert up.instances("local-sim") == []  # min_workers 0: nothing yet
    with Peak(up) as peak:
        ran = up.driver("local-sim", STRICT_SPREAD)
    assert "PG " in ran.stdout, ran.stdout + ran.stderr[-3000:] + up.said()
    group = json.loads(ran.stdout.split("PG ", 1)[1].splitlines()[0])
    assert group["ready"] is True and group["state"] == "CREATED", (group, up.said())
    bundles = group["bundles"]
    # each bundle on its own node, both workers of the cpu node type (Ray keeps GPU nodes
    # for GPU work)
    assert len(bundles) == 2, group
    assert len({b["rv_record"] for b in bundles.values()}) == 2, group
    assert {b["rv_node_type"] for b in bundles.values()} == {"cpu"}, group
    requests = up.requests("local-sim")
    assert [len(r["slots"]) for r in requests][:1] == [2], up.said()
    later = sum(len(r["slots"]) for r in requests[1:])
    assert later == up.ended_workers("local-sim"), up.said()
    assert peak.seen["local-sim"] <= 2, (peak.seen, up.said())


# --- 2. request_resources -----------------------------------------------------------------------

REQUEST_RESOURCES = textwrap.dedent(
    """
    import sys, ray
    from ray.autoscaler.sdk import request_resources
    ray.init(address=sys.argv[1], log_to_driver=False)
    request_resources(num_cpus=4)
    print("ASKED")
    """
)


def test_request_resources_rents_workers_before_any_task(upped: UpCluster) -> None:
    up = upped(local_sim(max_workers=3))
    assert up.instances("local-sim") == []
    with Peak(up) as peak:
        asked = up.driver("local-sim", REQUEST_RESOURCES, timeout=120)
        assert "ASKED" in asked.stdout, asked.stdout + asked.stderr[-3000:]

        def two_in_ray() -> list[dict[str, Any]] | None:
            alive = [n for n in up.ray_workers("local-sim") if n["alive"]]
            return alive if len(alive) >= 2 else None

        try:
            nodes = wait_for(two_in_ray, 300, every=3)
        except AssertionError:
            raise AssertionError(up.said()) from None
        time.sleep(6)  # three demand reads more: no third worker comes
    # 4 CPUs on 2-core nodes: two workers of the cpu node type, no task ever submitted
    assert {n["node_type"] for n in nodes} == {"cpu"}, nodes
    requests = up.requests("local-sim")
    assert [len(r["slots"]) for r in requests][:1] == [2], up.said()
    later = sum(len(r["slots"]) for r in requests[1:])
    assert later == up.ended_workers("local-sim"), up.said()
    assert peak.seen["local-sim"] <= 2, (peak.seen, up.said())


# --- 3. infeasible demand -----------------------------------------------------------------------

INFEASIBLE = textwrap.dedent(
    """
    import sys, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=0, resources={"TPU": 1})
    def on_a_tpu():
        return 1

    ref = on_a_tpu.remote()
    print("SUBMITTED", flush=True)
    ray.get(ref, timeout=600)
    """
)
INFEASIBLE_WORDS = "{TPU: 1} fits no node type of local-sim"


def test_an_infeasible_shape_rents_nothing_and_status_says_why(upped: UpCluster) -> None:
    up = upped(local_sim(max_workers=3))
    driver = subprocess.Popen(
        [sys.executable, "-c", INFEASIBLE, up.address("local-sim")],
        env=up.ray_env("local-sim"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def alerted() -> list[dict[str, Any]] | None:
            shown = up.status("--json")
            if shown.returncode != 0:
                return None
            view = json.loads(shown.stdout)
            found = [a for a in view["alerts"] if a["class"] == "infeasible_demand"]
            return found or None

        try:
            alerts = wait_for(alerted, 180, every=3)
        except AssertionError:
            raise AssertionError(up.said()) from None
        assert [a["message"] for a in alerts] == [INFEASIBLE_WORDS], alerts
        view = json.loads(up.status("--json").stdout)
        (cluster,) = [c for c in view["clusters"] if c["name"] == "local-sim"]
        assert [a["message"] for a in cluster["alerts"]] == [INFEASIBLE_WORDS], cluster
        human = up.status()
        assert INFEASIBLE_WORDS in human.stdout, human.stdout + human.stderr
        time.sleep(10)  # five demand reads and more: still nothing rented for it
        assert driver.poll() is None, "the driver ended: its task is no longer pending"
    finally:
        driver.kill()
        out, err = driver.communicate()
    assert "SUBMITTED" in out, out + err[-3000:]
    assert up.instances("local-sim") == [] and up.requests("local-sim") == [], up.said()
    calls = [e for e in up.ledger() if e["kind"] == "call"]
    assert calls == [], up.said()
    # said once (the ledger, once per shape), not at every reading
    said = [e for e in up.ledger() if e["class"] == "infeasible_demand"]
    assert len(said) == 1 and INFEASIBLE_WORDS in said[0]["message"], said


# --- 4. idle workers drained through Ray and ended down to min_workers -------------------------

FOUR_TASKS = textwrap.dedent(
    """
    import json, os, sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1)
    def hold():
        time.sleep(30)
        return os.environ["CONTAINER_ID"]

    ran = ray.get([hold.remote() for _ in range(4)], timeout=600)
    print("RAN ON", json.dumps(sorted(set(ran))))
    """
)


def test_idle_workers_are_drained_through_ray_and_ended_down_to_min_workers(
    upped: UpCluster,
) -> None:
    up = upped(local_sim(min_workers=1, max_workers=3, extra=IDLE_WINDOWS))
    try:
        wait_for(lambda: len(up.serving("local-sim")) == 1, 240, every=1)
    except AssertionError:
        raise AssertionError(up.said()) from None
    # four one-CPU tasks on 2-core workers: a second worker for the two that wait
    ran = up.driver("local-sim", FOUR_TASKS)
    assert "RAN ON" in ran.stdout, ran.stdout + ran.stderr[-3000:] + up.said()
    workers = {r["id"] for r in up.instances("local-sim") if r["role"] == "worker"}
    assert len(workers) >= 2, up.said()

    def at_min_workers() -> bool:
        ended = [r for r in up.instances("local-sim") if r["phase"] == "destroyed"]
        return len(up.serving("local-sim")) == 1 and bool(ended)

    try:
        wait_for(at_min_workers, 240, every=2)
    except AssertionError:
        raise AssertionError(up.said()) from None
    time.sleep(8)  # the idle nets run every 2 s: still one worker, never under min_workers
    (kept,) = up.serving("local-sim")
    ledger = up.ledger()
    idle_ended = {
        e["record"] for e in ledger if e["class"] in ("idle_stop", "idle_destroy") and e["record"]
    }
    # the idle end came from the money chain (not a worker's own report), for a worker that
    # is now destroyed, and never for the one kept at min_workers. (The stop is enough: a
    # stopped container's PID 1 gets SIGTERM, and the agent reports it and destroys its own
    # instance, so the idle destroy timer is not reached.)
    destroyed = {r["id"] for r in up.instances("local-sim") if r["phase"] == "destroyed"}
    assert idle_ended and idle_ended <= destroyed, up.said()
    assert kept["id"] not in idle_ended, up.said()
    # Ray saw the drain: the ended worker's node is dead, drained for idle termination
    # (or up's log has Ray's acceptance of the idle drain)
    nodes = {n["record"]: n for n in up.ray_workers("local-sim")}
    log = up.log.read_text()
    for record in sorted(idle_ended):
        node = nodes.get(record)
        assert node is not None and not node["alive"], (record, nodes, up.said())
        accepted = f"Ray node of {record} drained for idle end: True" in log
        assert node["death_reason"] == AUTOSCALER_DRAIN_IDLE or accepted, (node, up.said())
    assert nodes[kept["id"]]["alive"], (nodes, up.said())


# --- 5. two clusters in one up, each from its own demand --------------------------------------

TASKS = textwrap.dedent(
    """
    import json, os, sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1)
    def hold():
        time.sleep(45)
        return os.environ["CONTAINER_ID"]

    ran = ray.get([hold.remote() for _ in range(int(sys.argv[2]))], timeout=600)
    print("RAN ON", json.dumps(sorted(set(ran))))
    """
)


def test_two_clusters_in_one_up_each_scale_from_their_own_demand(upped: UpCluster) -> None:
    up = upped(local_sim("sim-a", max_workers=3), local_sim("sim-b", max_workers=3))
    assert up.instances("sim-a") == [] and up.instances("sim-b") == []

    def tasks(cluster: str, count: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", TASKS, up.address(cluster), str(count)],
            env=up.ray_env(cluster),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    with Peak(up) as peak:
        a = tasks("sim-a", 3)  # three one-CPU tasks: two 2-core workers
        try:
            wait_for(lambda: up.requests("sim-a"), 120, every=0.5)
            # sim-b's Ray asked for nothing: it rents nothing for sim-a's tasks
            assert up.instances("sim-b") == [], up.said()
            b = tasks("sim-b", 1)  # one task: one worker
            try:
                out_b, err_b = b.communicate(timeout=600)
            finally:
                b.kill()
            out_a, err_a = a.communicate(timeout=600)
        finally:
            a.kill()
    for out, err in ((out_a, err_a), (out_b, err_b)):
        assert "RAN ON" in out, out + err[-3000:] + up.said()
    ran = {
        "sim-a": ran_on(out_a),
        "sim-b": ran_on(out_b),
    }
    for cluster, wanted in (("sim-a", 2), ("sim-b", 1)):
        # as many slots as its own demand needs, beyond the workers that ended and were replaced
        # (Ray reports the three tasks' demand as the driver submits them: a reading between
        # two submissions rents for what it saw, and the next one for the rest)
        requests = up.requests(cluster)
        slots = sum(len(r["slots"]) for r in requests)
        assert slots - up.ended_workers(cluster) == wanted, (cluster, requests, up.said())
        assert peak.seen[cluster] <= wanted, (peak.seen, up.said())
        # each driver's tasks ran on its own cluster's workers only
        mine = {str(r["vast_id"]) for r in up.instances(cluster) if r.get("vast_id")}
        assert set(ran[cluster]) <= mine, (cluster, ran, mine)
        assert len(ran[cluster]) == wanted, (cluster, ran)


def ran_on(out: str) -> object:
    """The driver's answer: the rest of its `RAN ON` line (Ray may print warnings after it)."""
    return json.loads(out.split("RAN ON", 1)[1].splitlines()[0])
