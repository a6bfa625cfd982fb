"""The heartbeat's CPU is the container's own (issue 16): its cgroup's CPU time over the CPUs it may
use, not the host's /proc/stat, read from fixture machines written under tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agent import sampling
from agent.gpus_sample import GpuSampler
from agent.messages import heartbeat_body
from agent.sampling import CgroupDir, Sampler

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_SCHEMA = ROOT / "schemas" / "agent-heartbeat.v1.json"

# mountinfo lines as the kernel writes them
HOST_V1 = (
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
DOCKER_V1 = (
    "1200 1190 0:30 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup "
    "rw,cpu,cpuacct\n"
    "1201 1190 0:31 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
)
DOCKER_V2 = "1300 1290 0:28 / /sys/fs/cgroup ro,nosuid,nodev - cgroup2 cgroup rw,nsdelegate\n"
HYBRID_CGROUP = "9:name=systemd:/\n4:memory:/x\n2:cpuacct:/vastsim/7-ab.1\n1:cpu:/\n0::/\n"

IDLE_HOST = "cpu  100 0 100 800 0 0 0 0 0 0\n"
# 1 s later on a busy host: 10000 more busy jiffies, none idle
BUSY_HOST = "cpu  5100 0 5100 800 0 0 0 0 0 0\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class NoGpus(GpuSampler):
    def __init__(self) -> None:
        super().__init__(load_nvml=_no_library, which=lambda name: None)


def _no_library() -> object:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file")


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def sampler(root: Path, affinity: int = 8) -> tuple[Sampler, Clock]:
    clock = Clock()
    return Sampler(root, affinity=affinity, clock=clock, gpus=NoGpus()), clock


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0::/\n", (2, "/")),  # docker with a cgroup namespace (v2)
        ("0::/user.slice/session-1.scope\n", (2, "/user.slice/session-1.scope")),
        ("12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n",
         (1, "/docker/abc")),
        (HYBRID_CGROUP, (1, "/vastsim/7-ab.1")),  # a hybrid host: the v1 CPU controller wins
        ("1:name=systemd:/\n", None),
        ("", None),
    ],
)  # fmt: skip
def test_own_cgroup_from_proc_self_cgroup(text, expected):
    assert sampling.own_cgroup(text, "cpuacct") == expected


def test_cgroup_dirs_are_found_below_their_mounts():
    # docker on v1 mounts the container's own cgroup (/docker/abc) at /sys/fs/cgroup/cpu,cpuacct
    docker = sampling.cgroup_dirs("4:cpu,cpuacct:/docker/abc\n", DOCKER_V1, "cpuacct")
    assert docker[0] == CgroupDir(1, "/sys/fs/cgroup/cpu,cpuacct", "")
    assert docker[0].path == "/sys/fs/cgroup/cpu,cpuacct"
    # docker on v2: "0::/" and its own cgroup mounted at /sys/fs/cgroup
    assert sampling.cgroup_dirs("0::/\n", DOCKER_V2, "cpuacct")[0].path == "/sys/fs/cgroup"
    # a host: the hierarchy's root is mounted, the cgroup is below it
    host = sampling.cgroup_dirs(HYBRID_CGROUP, HOST_V1, "cpuacct")
    assert host[0].path == "/sys/fs/cgroup/cpuacct/vastsim/7-ab.1"
    assert host[0].ancestry() == [
        "/sys/fs/cgroup/cpuacct/vastsim/7-ab.1",
        "/sys/fs/cgroup/cpuacct/vastsim",
        "/sys/fs/cgroup/cpuacct",
    ]
    assert sampling.cgroup_dirs(HYBRID_CGROUP, HOST_V1, "cpu")[0].path == "/sys/fs/cgroup/cpu"
    # without mountinfo, the usual places
    guessed = [d.path for d in sampling.cgroup_dirs("3:cpu,cpuacct:/a\n", "", "cpuacct")]
    assert guessed == ["/sys/fs/cgroup/cpuacct/a", "/sys/fs/cgroup/cpu,cpuacct/a"]
    assert [d.path for d in sampling.cgroup_dirs("0::/b\n", "", "cpuacct")] == [
        "/sys/fs/cgroup/b",
        "/sys/fs/cgroup/unified/b",
    ]
    spaced = "40 31 0:38 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n"
    assert sampling.cgroup_dirs("0::/c\n", spaced, "cpu")[0].path == "/mnt/my cgroups/c"
    assert sampling.cgroup_dirs("1:name=systemd:/\n", HOST_V1, "cpuacct") == []


def test_the_pure_readings():
    assert sampling.usage_v2("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n") == 1_500_000
    assert sampling.usage_v2("user_usec 1\n") is None
    assert sampling.usage_v1("123456789\n") == 123456789
    assert sampling.usage_v1("garbage") is None
    assert sampling.cpus_available([2.5, None], 8) == 2.5  # the quota
    assert sampling.cpus_available([None, 4.0], 2) == 2.0  # the affinity set is smaller
    assert sampling.cpus_available([], 6) == 6.0
    assert sampling.cpus_available([], None) == 1.0
    assert sampling.cgroup_fraction(500_000_000, 1.0, 2.0) == 0.25
    assert sampling.cgroup_fraction(9_000_000_000, 1.0, 2.0) == 1.0  # clamped
    assert sampling.cgroup_fraction(1, 0.0, 2.0) is None


def test_a_quiet_container_on_a_busy_host_is_quiet(tmp_path):
    """The money leak of issue 16: the host's /proc/stat says busy, the container's cgroup says
    it used 10 ms of CPU in 1 s. The sample says quiet, from the cgroup."""
    write(
        tmp_path,
        {
            "proc/self/cgroup": "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
            "proc/self/mountinfo": DOCKER_V1,
            "proc/stat": IDLE_HOST,
            "sys/fs/cgroup/cpu,cpuacct/cpuacct.usage": "5000000000\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
    )
    sample, clock = sampler(tmp_path, affinity=4)
    first = sample.utilisation()
    assert (first["cpu_fraction"], first["cpu_source"]) == (None, None)
    clock.now += 1.0
    write(
        tmp_path,
        {"proc/stat": BUSY_HOST, "sys/fs/cgroup/cpu,cpuacct/cpuacct.usage": "5010000000\n"},
    )
    second = sample.utilisation()
    print("quiet container on a busy host:", second)
    assert second["cpu_source"] == "cgroup"
    assert second["cpu_fraction"] == 0.0025  # 10 ms over 1 s of 4 CPUs; the host was at 100 %


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "used_ms", "expected"),
    [
        ("150000 100000", 8, 750, 0.5),  # 1.5 CPUs of quota, half of it used
        ("max 100000", 4, 1000, 0.25),  # no quota: the affinity set's 4 CPUs
        ("400000 100000", 2, 1000, 0.5),  # a quota above the affinity set: the 2 CPUs
        ("100000 100000", 8, 3000, 1.0),  # clamped
    ],
)
def test_cgroup_v2_cpu_over_the_cpus_it_may_use(tmp_path, cpu_max, affinity, used_ms, expected):
    write(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "proc/self/mountinfo": DOCKER_V2,
            "proc/stat": IDLE_HOST,
            "sys/fs/cgroup/cpu.stat": "usage_usec 1000000\nuser_usec 900000\n",
            "sys/fs/cgroup/cpu.max": cpu_max + "\n",
        },
    )
    sample, clock = sampler(tmp_path, affinity=affinity)
    sample.utilisation()
    clock.now += 1.0
    write(tmp_path, {"sys/fs/cgroup/cpu.stat": f"usage_usec {1000000 + used_ms * 1000}\n"})
    second = sample.utilisation()
    assert (second["cpu_fraction"], second["cpu_source"]) == (expected, "cgroup")


def test_cgroup_v1_on_a_host_with_the_cpu_controller_mounted_apart(tmp_path):
    """The quota lives in the `cpu` tree (here on the parent), the usage in the `cpuacct` tree."""
    write(
        tmp_path,
        {
            "proc/self/cgroup": HYBRID_CGROUP.replace("1:cpu:/", "1:cpu:/vastsim/7-ab.1"),
            "proc/self/mountinfo": HOST_V1,
            "proc/stat": IDLE_HOST,
            "sys/fs/cgroup/cpuacct/vastsim/7-ab.1/cpuacct.usage": "0\n",
            "sys/fs/cgroup/cpuacct/cpuacct.usage": "999999999999\n",  # the whole host's
            "sys/fs/cgroup/cpu/vastsim/7-ab.1/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/vastsim/7-ab.1/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpu/vastsim/cpu.cfs_quota_us": "200000\n",
            "sys/fs/cgroup/cpu/vastsim/cpu.cfs_period_us": "100000\n",
        },
    )
    sample, clock = sampler(tmp_path, affinity=16)
    sample.utilisation()
    clock.now += 2.0
    write(tmp_path, {"sys/fs/cgroup/cpuacct/vastsim/7-ab.1/cpuacct.usage": "3000000000\n"})
    second = sample.utilisation()
    assert (second["cpu_fraction"], second["cpu_source"]) == (0.75, "cgroup")  # 3 s / (2 s × 2)
    assert second["sample_seconds"] == 2.0


def test_without_a_readable_cgroup_the_host_is_the_source(tmp_path):
    write(
        tmp_path,
        {
            "proc/self/cgroup": "4:cpu,cpuacct:/docker/abc\n",  # named, but nothing to read
            "proc/stat": IDLE_HOST,
        },
    )
    sample, clock = sampler(tmp_path)
    assert sample.cgroup_usage() is None
    sample.utilisation()
    clock.now += 1.0
    write(tmp_path, {"proc/stat": "cpu  150 0 150 900 0 0 0 0 0 0\n"})
    second = sample.utilisation()
    assert (second["cpu_fraction"], second["cpu_source"]) == (0.5, "host")


NET_DEV = """Inter-|   Receive                            |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop ...
    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0
  eth0: {eth} 10 0 0 0 0 0 0 {eth} 10 0 0 0 0 0 0
"""


def test_network_bytes_are_the_containers_own_interfaces_and_none_in_the_hosts_namespace(
    tmp_path,
):
    """A vast container's /proc/net/dev is its own namespace's: every byte but loopback counts.
    vastsim's process runner shares the host's network (its containers talk over loopback), so
    there the host's eth0 is nobody's container traffic: the agent counts no interface."""
    own = Sampler(tmp_path, affinity=1, gpus=NoGpus(), clock=Clock())
    shared = Sampler(
        tmp_path,
        affinity=1,
        gpus=NoGpus(),
        clock=own.clock,
        count_network=sampling.counts_network({sampling.HOST_NETWORK_ENV: "1"}),
    )
    write(tmp_path, {"proc/net/dev": NET_DEV.format(lo=1_000, eth=1_000)})
    own.utilisation(), shared.utilisation()
    own.clock.now += 30.0  # type: ignore[attr-defined]
    write(tmp_path, {"proc/net/dev": NET_DEV.format(lo=90_000_000, eth=5_001_000)})
    mine, hosts = own.utilisation(), shared.utilisation()
    assert (mine["net_rx_bytes"], mine["net_tx_bytes"]) == (5_000_000, 5_000_000)  # not lo's
    assert (hosts["net_rx_bytes"], hosts["net_tx_bytes"]) == (None, None)
    assert sampling.counts_network({}) and sampling.counts_network({"VASTSIM_HOST_NETWORK": "0"})


def test_this_process_reads_a_cgroup_of_its_own():
    """On this machine (a container, a CI runner or a vastsim container) there is a cgroup."""
    own = Sampler(gpus=NoGpus()).cgroup_usage()
    assert own is not None and own.used_ns > 0 and own.cpus >= 1


def test_a_heartbeat_with_the_new_fields_validates(tmp_path):
    schema = json.loads(HEARTBEAT_SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    sample = Sampler(gpus=NoGpus())
    sample.utilisation()
    use = sample.utilisation()
    assert use["cpu_source"] in ("cgroup", "host")

    class Settings:
        instance_id = 7

    body = heartbeat_body(
        Settings(),  # type: ignore[arg-type]
        record_id="r-1",
        boot_id="0123abcd",
        seq=1,
        sent_at=1.0,
        ray={"state": "running", "pid": 1},
        processes={"pids": 3, "pids_limit": None},
        worker_ports={"in_use": [], "total": 0},
        utilisation=use,
    )
    validator.validate(body)
    gpu = {"gpu_fraction": 0.9, "gpu_memory_fraction": 0.5, "gpu_source": "nvml"}
    validator.validate({**body, "utilisation": {**use, **gpu}})
    new = ("cpu_source", "gpu_memory_fraction", "gpu_source")
    older = {k: v for k, v in use.items() if k not in new}
    validator.validate({**body, "utilisation": older})  # an older agent's heartbeat
    for wrong in ({"cpu_source": "guess"}, {"gpu_source": "dcgm"}, {"gpu_memory_fraction": 1.5}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({**body, "utilisation": {**use, **wrong}})


def test_a_heartbeat_out_of_step_repeats_the_last_full_window(tmp_path):
    """Issue 21's e2e run: the heartbeat that acknowledges a stop goes at once, and its window
    of milliseconds held mostly the agent's own work, read as traffic, calling every stop off.
    A window under MIN_WINDOW_SECONDS repeats the last full sample; the counters keep running,
    so the next full window covers the short one's CPU too."""
    cgroup = "sys/fs/cgroup/cpu.stat"
    write(
        tmp_path,
        {
            "proc/self/cgroup": "0::/\n",
            "proc/self/mountinfo": DOCKER_V2,
            "proc/stat": IDLE_HOST,
            cgroup: "usage_usec 0\n",
            "sys/fs/cgroup/cpu.max": "max 100000\n",
        },
    )
    sample, clock = sampler(tmp_path, affinity=1)
    sample.utilisation()
    clock.now += 30.0
    write(tmp_path, {cgroup: "usage_usec 300000\n"})  # 0.3 s of CPU in 30 s: quiet
    quiet = sample.utilisation()
    assert quiet["cpu_fraction"] == 0.01
    clock.now += 0.05
    write(tmp_path, {cgroup: "usage_usec 330000\n"})  # 30 ms in 50 ms: "60 %"
    assert sample.utilisation() == quiet
    clock.now += 29.95
    write(tmp_path, {cgroup: "usage_usec 630000\n"})
    full = sample.utilisation()
    assert full["sample_seconds"] == 30.0 and full["cpu_fraction"] == 0.011  # the short one in it
