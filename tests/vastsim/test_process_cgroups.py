"""Each simulated container has a CPU-accounting cgroup of its own (issue 16), as a vast container
does: PID 1 and every child are born in it, and it is gone once the container has ended."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waiting import wait_for
from vastsim import ProcessRunner
from vastsim.containers.cgroups import cgroup_base, cgroup_hierarchy, cgroup_pids
from vastsim.containers.pidns import no_namespaces
from vastsim.containers.protocol import ContainerSpec

BASE = cgroup_base()
pytestmark = pytest.mark.skipif(
    BASE is None,
    reason="no writable cgroup hierarchy here (needs root and a cpuacct v1 or v2 cgroup mount)",
)

# PID 1 starts two children (one in a session of its own), says where each of them is, and
# exits when its first child does
FAMILY = (
    "sleep 1000 & a=$!; setsid sleep 1001 & b=$!; "
    'for p in $$ $a $b; do grep -E "cpuacct|^0::" /proc/$p/cgroup | head -1; done > where.tmp; '
    'echo "$a" > child; mv where.tmp where; wait "$a"'
)


def spec(instance_id: int, boot: int = 1) -> ContainerSpec:
    return ContainerSpec(
        instance_id=instance_id,
        boot=boot,
        image="vastsim/test:latest",
        runtype="args",
        args=("sh", "-c", FAMILY),
        onstart=None,
        env={},
        ports={},
        public_ip="127.9.0.1",
        label=None,
    )


@pytest.fixture(
    params=[
        pytest.param(
            None,
            id="namespaces",
            marks=pytest.mark.skipif(no_namespaces() is not None, reason="no PID namespaces"),
        ),
        pytest.param(False, id="groups"),
    ]
)
def runner(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessRunner]:
    made = ProcessRunner(tmp_path / "containers", stop_grace=1.0, contain=request.param)
    try:
        yield made
    finally:
        made.shutdown()


def where(runner: ProcessRunner, instance_id: int) -> list[str]:
    said = runner.workspace(instance_id) / "where"
    return said.read_text().split() if said.exists() else []


def test_each_container_has_a_cgroup_of_its_own_and_it_goes_with_the_container(
    runner: ProcessRunner,
) -> None:
    runner.start(spec(1), 0.0)
    runner.start(spec(2), 0.0)
    one, two = runner.cgroup(1), runner.cgroup(2)
    assert one is not None and two is not None and one != two
    assert BASE is not None and one.parent == two.parent == BASE
    print("cgroups:", one, two)

    for instance_id, cgroup in ((1, one), (2, two)):
        lines = wait_for(lambda i=instance_id: where(runner, i))
        # PID 1 and both children (the one that left the session too) are in the container's
        assert len(lines) == 3
        assert all(line.endswith("/" + cgroup.name) for line in lines), lines
        # the runner's view: the PID namespace's (all 3), or the process group's (the setsid
        # child has left it); waited for together with the cgroup's, since the `mv` that made
        # `where` can still be exiting when the file is there (CI saw it as a fourth pid)
        wait_for(
            lambda c=cgroup, i=instance_id: (
                len(members := set(cgroup_pids(c))) == 3 and set(runner.pids(i)) <= members
            )
        )

    runner.destroy(1, 0.0)
    assert not one.exists()  # destroy: gone at once
    assert two.exists()

    # PID 1 exits by itself (its child ended): the runner reaps it and removes its cgroup
    child = runner.host_pid(2, int((runner.workspace(2) / "child").read_text()))
    assert child is not None
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: 2 in runner.step(0.0) or None, timeout=10)
    assert not two.exists()

    runner.start(spec(3), 0.0)
    three = runner.cgroup(3)
    assert three is not None and three.exists()
    runner.stop(3, 0.0)  # sh has no TERM handler as PID 1: KILL after the grace
    wait_for(lambda: runner.step(0.0) is not None and not three.exists(), timeout=10)
    assert runner.pids(3) == []


def test_shutdown_removes_every_cgroup(tmp_path: Path) -> None:
    runner = ProcessRunner(tmp_path / "containers")
    cgroups = []
    for instance_id in (1, 2):
        runner.start(spec(instance_id), 0.0)
        cgroups.append(runner.cgroup(instance_id))
    assert all(c is not None and c.exists() for c in cgroups)
    wait_for(lambda: all(where(runner, i) for i in (1, 2)))
    runner.shutdown()
    assert not any(c is not None and c.exists() for c in cgroups)


def test_a_container_starts_when_no_cgroup_can_be_made(tmp_path: Path) -> None:
    runner = ProcessRunner(tmp_path / "containers")
    runner._cgroups.base = tmp_path / "not-a-cgroup-fs" / "vastsim"  # a plain directory tree
    (tmp_path / "not-a-cgroup-fs").write_text("a file where a directory should be")
    try:
        runner.start(spec(1), 0.0)
        assert runner.cgroup(1) is None
        assert wait_for(lambda: where(runner, 1))
    finally:
        runner.shutdown()


def test_the_hierarchy_is_found_from_proc_self_cgroup_and_mountinfo() -> None:
    v1 = (
        "33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    )
    hybrid = "2:cpuacct:/ci/job\n0::/\n"
    assert cgroup_hierarchy(hybrid, v1) == Path("/sys/fs/cgroup/cpuacct/ci/job")
    v2 = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    assert cgroup_hierarchy("0::/user.slice\n", v2) == Path("/sys/fs/cgroup/user.slice")
    assert cgroup_hierarchy("0::/\n", v2) == Path("/sys/fs/cgroup")
    assert cgroup_hierarchy("1:name=systemd:/\n", v1) is None


def test_the_cgroup_counts_the_containers_cpu(runner: ProcessRunner) -> None:
    """What the agent reads: the container's own CPU time, counted by the kernel."""
    # half a second of CPU, however long a loaded machine takes to give it
    burn = "import time\nwhile time.process_time() < 0.5: pass\n"
    runner.start(
        ContainerSpec(
            instance_id=9,
            boot=1,
            image="vastsim/test:latest",
            runtype="args",
            args=(sys.executable, "-c", burn + "open('done', 'w').close()\ntime.sleep(1000)\n"),
            onstart=None,
            env={},
            ports={},
            public_ip="127.9.0.9",
            label=None,
        ),
        time.time(),
    )
    cgroup = runner.cgroup(9)
    assert cgroup is not None
    wait_for((runner.workspace(9) / "done").exists)
    if (cgroup / "cpuacct.usage").exists():
        used_ns = int((cgroup / "cpuacct.usage").read_text())
    else:
        stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
        used_ns = int(stat["usage_usec"]) * 1000
    print("the container used", used_ns / 1e9, "s of CPU")
    assert used_ns >= 0.3e9
