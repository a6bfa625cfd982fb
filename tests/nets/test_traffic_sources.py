"""The idle scanner's traffic: two sources, one verdict (DESIGN.md 5), and the sample's rules.

The whole-controller proof is tests/scenarios/test_traffic_both_sources.py; this is the table.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from reconciler.head import heartbeats
from reconciler.head.messages import Heartbeat, RaySample
from reconciler.nets.idle import traffic, traffic_by_record

T, F, U = True, False, None


@pytest.mark.parametrize(
    ("ray", "agent", "ray_reads", "verdict"),
    [
        (T, F, True, T),  # an actor or a lease: traffic whatever the sample says
        (F, T, True, T),  # work outside Ray (a download): traffic whatever Ray says
        (U, T, True, T),  # Ray unreadable, the container busy: the sample clears
        (F, F, True, F),  # both quiet: quiet
        (F, U, True, F),  # Ray quiet, no fresh sample: Ray's word (as before issue 16)
        (U, F, True, U),  # Ray read for this cluster but unknown now: never quiet on the sample
        (U, U, True, U),
        (U, F, False, F),  # no Ray reader: the sample decides
        (U, T, False, T),
        (U, U, False, U),
    ],
)
def test_one_verdict_from_two_sources(
    ray: bool | None, agent: bool | None, ray_reads: bool, verdict: bool | None
) -> None:
    assert traffic(ray, agent, ray_reads=ray_reads) is verdict


def test_by_record_covers_every_record_either_source_names() -> None:
    out = traffic_by_record({"a": False, "b": False}, {"b": True, "c": False}, {"a", "b"})
    assert out == {"a": False, "b": True, "c": False}


def beat(**sample: float | int | str | None) -> Heartbeat:
    base = Heartbeat(
        11, "i1", "abcd0001", 2, time.time(), RaySample("running", 1, None, 1.0), 3, None,
        (), 2, 30.0, 0.0, 0.0, 0.2, 0, 0, None,
    )  # fmt: skip
    return replace(base, **sample)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sample", "busy"),
    [
        ({}, False),
        ({"cpu_fraction": 0.5, "cpu_source": "cgroup"}, True),
        ({"cpu_fraction": 0.05, "cpu_source": "cgroup"}, False),
        ({"gpu_fraction": 0.3}, True),
        ({"gpu_fraction": 0.0, "gpu_memory_activity": 0.2}, True),  # memory read and written
        ({"gpu_fraction": 0.0, "gpu_memory_fraction": 0.9}, False),  # memory held, nothing runs
        ({"net_rx_bytes": 30 * 100 * 1024}, True),  # 100 kB/s over the 30-s sample
        ({"net_rx_bytes": 30 * 1024}, False),
    ],
)
def test_what_a_sample_counts_as_traffic(sample: dict[str, float], busy: bool) -> None:
    assert heartbeats.busy(beat(**sample)) is busy


def test_the_newer_sample_fields_are_read_and_an_older_agents_sample_still_parses() -> None:
    doc = {
        "instance_id": 11, "record_id": "i1", "boot_id": "abcd0001", "seq": 2, "sent_at": 1.0,
        "ray": {"state": "running", "pid": 1},
        "processes": {"pids": 3, "pids_limit": None},
        "worker_ports": {"in_use": [], "total": 2},
        "utilisation": {
            "sample_seconds": 30.0, "cpu_fraction": 0.01, "load1": 0.1,
            "memory_used_fraction": 0.2, "net_rx_bytes": 0, "net_tx_bytes": 0,
            "gpu_fraction": 0.0,
        },
    }  # fmt: skip
    old = Heartbeat.of(doc, received_at=2.0)
    assert old.gpu_memory_activity is None and old.cpu_source is None
    doc["utilisation"] |= {  # type: ignore[operator]
        "gpu_memory_activity": 0.4, "gpu_memory_fraction": 0.7,
        "cpu_source": "cgroup", "gpu_source": "nvml",
    }  # fmt: skip
    new = Heartbeat.of(doc, received_at=2.0)
    assert (new.gpu_memory_activity, new.gpu_memory_fraction) == (0.4, 0.7)
    assert (new.cpu_source, new.gpu_source) == ("cgroup", "nvml")
    assert heartbeats.busy(new) is True
