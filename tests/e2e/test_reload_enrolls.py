"""A cluster added by a spec reload rents workers that enroll through its own bootloader
(issue 14: a cluster added by a reload rented without its bootloader and head services).

The real watch loop reads a spec directory holding one cluster (`live`, no workers wanted). A second
file is written into the directory; watch reloads, `HeadServices` gives the new cluster its PKI,
its TLS ports and its launcher, and the planner rents its worker. vastsim runs the container as a
process whose PID 1 is the real bootloader: it downloads the agent from the new cluster's head,
and the agent enrolls there over TLS. The new cluster has no Ray head, so what follows enrollment
(Ray never joins) is not this test's business.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.live import live_cluster, spec_text
from tests.e2e.test_live_seed import loopback_only
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not loopback_only(), reason="needs a loopback-only network namespace"),
]


def test_a_cluster_added_by_a_reload_enrolls_through_its_bootloader(tmp_path: Path) -> None:
    with live_cluster(tmp_path / "live", min_workers=0, in_directory=True) as live:
        (live.specs / "beta.yaml").write_text(spec_text("beta", min_workers=1, factor=1))

        def enrolled() -> list[dict[str, object]]:
            return [e for e in live.ledger() if e["cluster"] == "beta" and e["class"] == "enrolled"]

        (entry,) = wait_for(enrolled, 120)
        record = live.records().instances[str(entry["record"])]
        assert record.cluster == "beta" and record.enrolled_from is not None
        # it was rented with beta's bootloader and token, and enrolled at beta's own head
        rents = [
            e
            for e in live.ledger()
            if e["cluster"] == "beta" and e["kind"] == "outcome" and "rented" in str(e["message"])
        ]
        assert rents, "beta rented nothing"
        assert not [e for e in live.ledger() if e["cluster"] == "live" and e["kind"] == "call"]
