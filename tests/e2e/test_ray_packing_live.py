"""Six one-CPU Ray tasks on 2-core workers rent three workers, as Ray's own autoscaler would
(issue 15: the first build rented one node per pending task, six workers and ten instances).

`ray-vast up` on the example cluster (min_workers 0, max_workers 6) with real Ray; a driver
submits six 45-s tasks of one CPU each. ray-vast reads the demand from Ray's GCS and packs it with
Ray's scheduler: one request of three slots, three workers, the six tasks on them.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.e2e.test_live_seed import loopback_only
from tests.e2e.upped import Peak, UpCluster, local_sim

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time, ray
    ray.init(address=sys.argv[1], log_to_driver=False)

    @ray.remote(num_cpus=1)
    def hold():
        time.sleep(45)
        return os.environ["CONTAINER_ID"]

    ran = ray.get([hold.remote() for _ in range(6)], timeout=600)
    print("RAN ON", json.dumps(sorted(set(ran))))
    """
)


def test_six_one_cpu_tasks_on_two_core_workers_rent_three(upped: UpCluster) -> None:
    up = upped(local_sim(max_workers=6, candidate_factor=2))
    assert up.records().get("instances", {}) == {}  # min_workers 0: nothing yet
    with Peak(up) as peak:
        ran = up.driver("local-sim", DRIVER, timeout=900)
    assert "RAN ON" in ran.stdout, ran.stdout + ran.stderr
    # the rest of the driver's line (Ray may print warnings after it)
    containers = json.loads(ran.stdout.split("RAN ON", 1)[1].splitlines()[0])
    entries = up.ledger()
    story = "\n".join(
        f"{e['time']:.1f} {e['kind']} {e['class']} {e.get('record')}: {e['message'][:120]}"
        for e in entries
        if e["kind"] in ("decision", "detection") or e["class"] in ("enrolled", "serving")
    )
    requests = up.requests("local-sim")
    # Ray's packing: one request of three slots for the six tasks
    assert [len(r["slots"]) for r in requests][:1] == [3], story
    # any later slot replaces a worker that ended (on this 2-core machine a Ray node that
    # starts beside two others can time out: its agent reports ray_exited and ends it); one
    # that ends after the tasks are done is not replaced (a CI run saw 6 ended, 5 replaced)
    ended = [e for e in entries if e["class"] == "worker_report" and "(worker)" in e["message"]]
    assert sum(len(r["slots"]) for r in requests[1:]) <= len(ended), story
    assert len(containers) == 3 and peak.seen["local-sim"] <= 3, (containers, peak.seen, story)
