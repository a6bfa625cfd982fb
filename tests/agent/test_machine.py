"""What the agent reads of its machine: the real core count (cgroup v1, v2, affinity), GPUs, and
the heartbeat's sample, each from fixture files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import cores, sampling

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    ("fixture", "affinity", "expected", "source"),
    [
        ("v2-quota", 8, 2, "cgroup v2 cpu.max '250000 100000'"),  # 2.5 CPUs: 2, never 3
        ("v2-quota", 1, 1, "affinity of 1 CPUs"),  # pinned to one core: the smaller wins
        ("v2-unlimited", 6, 6, "affinity of 6 CPUs"),
        ("v2-nested", 16, 3, "cgroup v2 cpu.max '300000 100000'"),  # a parent's quota counts
        ("v1-quota", 32, 4, "cgroup v1 cfs quota 400000/100000"),
        ("v1-unlimited", 12, 12, "affinity of 12 CPUs"),
        ("v1-half", 8, 1, "cgroup v1 cfs quota 50000/100000"),  # half a core is still 1
    ],
)
def test_the_real_core_count_from_cgroup_files(fixture, affinity, expected, source):
    counted = cores.read_cores(FIXTURES / fixture, affinity=affinity)
    assert (counted.cores, counted.source) == (expected, source)


def test_the_pure_rule_over_file_contents():
    assert cores.cores_from(cpu_max=["max 100000"], online=64).cores == 64
    assert cores.cores_from(cpu_max=["150000 100000", "max"], affinity=8).cores == 1
    assert cores.cores_from(cfs=[("-1", "100000")], affinity=3).cores == 3
    assert cores.cores_from(cpu_max=["garbage"], cfs=[("x", "y")], online=None).cores == 1
    assert cores.quota_v2("200000") == 2.0  # period defaults to 100000
    assert cores.quota_v1("-1", "100000") is None


def test_this_machine_is_counted_from_its_affinity_not_os_cpu_count():
    counted = cores.read_cores()
    assert 1 <= counted.cores <= len(os.sched_getaffinity(0))


def test_gpus_are_the_nvidia_device_nodes():
    names = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null", "nvidia10"]
    assert cores.count_gpus(names) == 3
    assert cores.read_gpus(FIXTURES / "no-such-dev") == 0


def test_the_sample_readings():
    machine = FIXTURES / "machine" / "proc"
    assert sampling.cpu_times((machine / "stat").read_text()) == (
        5668,
        9390,
    )  # idle 3699 + iowait 23
    assert sampling.net_bytes((machine / "net" / "dev").read_text()) == (5100, 7200)
    assert sampling.memory_used_fraction((machine / "meminfo").read_text()) == 0.75
    assert sampling.load1((machine / "loadavg").read_text()) == 0.42
    tcp = (machine / "net" / "tcp").read_text()
    assert sampling.local_ports([tcp]) == {40000, 40002}
    assert sampling.listening_ports([tcp]) == {40000}
    assert sampling.pids_limit("max\n") is None and sampling.pids_limit("4096\n") == 4096


def test_the_sampler_turns_counters_into_a_sample(tmp_path):
    sampler = sampling.Sampler(FIXTURES / "machine")
    first = sampler.utilisation()
    assert first["sample_seconds"] is None and first["load1"] == 0.42
    second = sampler.utilisation()
    assert second["sample_seconds"] is not None and second["net_rx_bytes"] == 0
    assert sampler.ports_in_use([40000, 40001, 40002]) == [40000, 40002]
    assert sampler.listening(40000) and not sampler.listening(40002)
