"""The process runner: containers are real local process trees with vast's environment and
vast's PID-1 semantics, each in its own PID namespace (or, where there are none, a process group).
Real time, so every wait polls a condition with a deadline."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.waiting import wait_for
from vastsim import ProcessRunner, RealClock, Sim, Timing, serve
from vastsim.containers.pidns import no_namespaces
from vastsim.containers.sweep import MARKER, group_pids
from vastsim.server import Server

from .conftest import IMAGE, KEY, offer_on, show, small_market

SCRIPT = r"""
import http.client, json, os, signal, subprocess, sys, time, urllib.parse
boot = os.environ["VASTSIM_BOOT"]
child = subprocess.Popen(["sleep", "1000"])
stray = subprocess.Popen(["sleep", "1001"], start_new_session=True)  # leaves the group

def on_term(sig, frame):
    open(f"term-{boot}", "w").close()
    os._exit(0)

def on_other(sig, frame):
    open(f"caught-{sig}-{boot}", "w").close()

signal.signal(signal.SIGTERM, on_term)
for other in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
    signal.signal(other, on_other)
# call the API back with the instance's key, from the container's own address
vast = urllib.parse.urlsplit(os.environ["VAST_URL"])
source = (os.environ["VASTSIM_SOURCE_IP"], 0)
conn = http.client.HTTPConnection(vast.hostname, vast.port, timeout=10, source_address=source)
conn.request(
    "GET",
    "/api/v0/instances/" + os.environ["CONTAINER_ID"] + "/",
    headers={"Authorization": "Bearer " + os.environ["CONTAINER_API_KEY"]},
)
shown = json.load(conn.getresponse())["instances"]["id"]
conn.close()
info = {
    "pid": os.getpid(),
    "child": child.pid,
    "stray": stray.pid,
    "env": dict(os.environ),
    "shown": shown,
}
with open(f"env-{boot}.tmp", "w") as handle:
    json.dump(info, handle)
os.rename(f"env-{boot}.tmp", f"env-{boot}.json")
print("booted", boot, flush=True)
while not os.path.exists("exit-now"):
    time.sleep(0.02)
os.remove("exit-now")
sys.exit(3)
"""


def alive(pid: int) -> bool:
    """A live (non-zombie) process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def on_host(runner: ProcessRunner, instance_id: int, boot: dict[str, Any]) -> dict[str, Any]:
    """A boot's report with its pids (as the container sees them) turned into the host's."""
    pids = {k: runner.host_pid(instance_id, boot[k]) for k in ("pid", "child", "stray")}
    assert all(pids.values()), (boot, pids)
    return {**boot, **pids}


NAMESPACES = no_namespaces() is None
needs_namespaces = pytest.mark.skipif(
    not NAMESPACES, reason=f"no PID namespaces: {no_namespaces()}"
)


@pytest.fixture(
    params=[
        pytest.param(None, id="namespaces", marks=needs_namespaces),
        pytest.param(False, id="groups"),
    ]
)
def served(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Sim, ProcessRunner, Server, httpx.Client]]:
    runner = ProcessRunner(tmp_path / "containers", stop_grace=2.0, contain=request.param)
    sim = Sim(
        market=small_market(), clock=RealClock(), api_key=KEY, runner=runner, timing=Timing.fast()
    )
    with (
        serve(sim, step_interval=0.02) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        yield sim, runner, server, http


def test_process_container_env_signals_restarts_and_destroy(
    served: tuple[Sim, ProcessRunner, Server, httpx.Client],
) -> None:
    sim, runner, server, http = served
    body = {
        "image": IMAGE,
        "disk": 10,
        "label": "rv.proc.1",
        "runtype": "args",
        "args": [sys.executable, "-c", SCRIPT],
        "env": {"MY_VAR": "hello", "-p 8080:8080": "1"},
    }
    answer = http.put(f"/api/v0/asks/{offer_on(http, 1)}/", json=body).json()
    instance_id = answer["new_contract"]
    workspace = runner.workspace(instance_id)

    boot1 = wait_for(lambda: read_json(workspace / "env-1.json"))
    env = boot1["env"]
    row = show(http, instance_id)
    assert row is not None
    assert row["actual_status"] == "running"
    assert env["CONTAINER_ID"] == str(instance_id)
    assert env["CONTAINER_API_KEY"] == answer["instance_api_key"]
    # its own loopback address: the listing's, PUBLIC_IPADDR, and the source of its connections
    address = sim.instances[instance_id].public_ip
    assert address.startswith("127.") and not address.startswith("127.0.0.")
    assert env["PUBLIC_IPADDR"] == address == row["public_ipaddr"]
    assert env["VASTSIM_SOURCE_IP"] == address
    [callback] = [r for r in sim.requests if r.identity == "instance" and r.method == "GET"]
    assert callback.client == address
    assert env["VAST_TCP_PORT_8080"] == row["ports"]["8080/tcp"][0]["HostPort"]
    assert env["VAST_URL"] == server.url
    assert env["MY_VAR"] == "hello"
    # the offer's GPU, simulated: the count, and a fake device id for Ray to hand to GPU tasks
    assert (env["VASTSIM_GPUS"], env["CUDA_VISIBLE_DEVICES"]) == ("1", "0")
    # its network is the host's: the agent's sample counts no interface as the container's
    assert env["VASTSIM_HOST_NETWORK"] == "1"
    assert boot1["shown"] == instance_id  # the container called the API back with its own key
    # PID 1 sees itself as 1 in its namespace; the host numbers it as runner.pid
    assert boot1["pid"] == (1 if runner.contained else runner.pid(instance_id))
    boot1 = on_host(runner, instance_id, boot1)
    assert runner.pid(instance_id) == boot1["pid"]

    # KILL, QUIT, USR1, USR2 and CONT from inside do not reach PID 1
    for sig in (signal.SIGKILL, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        assert sim.signal_from_inside(instance_id, sig) is False
    assert alive(boot1["pid"])

    # TERM does: PID 1 exits (its handler leaves a mark), and vast starts the container again
    assert sim.signal_from_inside(instance_id, signal.SIGTERM) is True
    boot2 = on_host(runner, instance_id, wait_for(lambda: read_json(workspace / "env-2.json")))
    assert (workspace / "term-1").exists()
    assert list(workspace.glob("caught-*")) == []
    assert boot2["pid"] != boot1["pid"]
    assert not alive(boot1["pid"])
    assert not alive(boot1["child"])  # the rest of the old container died with PID 1
    assert not alive(boot1["stray"])  # even what left its process group

    # PID 1 exits by itself: same instance, new boot
    (workspace / "exit-now").touch()
    boot3 = on_host(runner, instance_id, wait_for(lambda: read_json(workspace / "env-3.json")))
    assert not alive(boot2["pid"])
    assert not alive(boot2["child"])
    assert sim.instances[instance_id].boots == 3
    row = show(http, instance_id)
    assert row is not None
    assert row["actual_status"] == "running"

    logs = http.put(f"/api/v0/instances/request_logs/{instance_id}/", json={}).json()
    text = httpx.get(logs["result_url"]).text
    assert "booted 1\nbooted 2\nbooted 3\n" in text

    # destroy kills the whole container
    assert http.delete(f"/api/v0/instances/{instance_id}/").json() == {"success": True}
    wait_for(lambda: not any(alive(boot3[k]) for k in ("pid", "child", "stray")))
    assert group_pids(boot3["pid"]) == []
    assert runner.pids(instance_id) == []


def test_onstart_runs_under_sh_and_stop_ends_the_group(
    served: tuple[Sim, ProcessRunner, Server, httpx.Client],
) -> None:
    _, runner, _, http = served
    body = {
        "image": IMAGE,
        "disk": 10,
        "runtype": "ssh_direc ssh_proxy",
        "onstart": 'echo "started $VASTSIM_BOOT $MY_VAR" > marker; sleep 1000 &',
        "env": {"MY_VAR": "x"},
    }
    instance_id = http.put(f"/api/v0/asks/{offer_on(http, 1)}/", json=body).json()["new_contract"]
    marker = runner.workspace(instance_id) / "marker"
    wait_for(lambda: marker.exists() and marker.read_text() == "started 1 x\n")
    pid = runner.pid(instance_id)
    assert pid is not None
    wait_for(lambda: len(runner.pids(instance_id)) == 2)  # the idle PID 1 and the sleep
    assert alive(pid)  # the container stays up after onstart finished
    http.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
    wait_for(lambda: runner.pids(instance_id) == [])
    assert runner.pid(instance_id) is None
    http.put(f"/api/v0/instances/{instance_id}/", json={"state": "running"})
    wait_for(lambda: marker.read_text() == "started 2 x\n")


def test_shutdown_kills_every_container(tmp_path: Path) -> None:
    runner = ProcessRunner(tmp_path)
    sim = Sim(
        market=small_market(), clock=RealClock(), api_key=KEY, runner=runner, timing=Timing.fast()
    )
    with serve(sim, step_interval=0.02) as server:
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"})
        ids = []
        for machine_id in (1, 2):
            body = {"image": IMAGE, "runtype": "args", "args": ["sleep", "1000"]}
            answer = http.put(f"/api/v0/asks/{offer_on(http, machine_id)}/", json=body)
            ids.append(answer.json()["new_contract"])
        wait_for(lambda: len([i for i in ids if runner.pid(i)]) == 2)
        pids = [runner.pid(i) for i in ids]
        http.close()
    assert sim.instances == {}
    assert all(p is not None and not alive(p) for p in pids)


# PID 1 leaves behind a grandchild in a session of its own that ignores TERM and HUP and has
# dropped the container's marker from its environment (as Ray's agents do: `setsid`, then a
# process title written over the environment). Only the container's PID namespace ends it.
LEAVER = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        env = {k: v for k, v in os.environ.items() if k != "VASTSIM_CONTAINER"}
        os.execve(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[2]], env)
    os._exit(0)
os.wait()
with open("pid1.tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.rename("pid1.tmp", "pid1")
while True:
    time.sleep(1)
"""
STAYER = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
with open("stayer.tmp", "w") as handle:
    handle.write(str(os.getpid()))
os.rename("stayer.tmp", "stayer")
while True:
    time.sleep(1)
"""


def stayers(tag: str) -> list[int]:
    """Live processes running STAYER with `tag` (`python -c STAYER tag`), host pids, from /proc."""
    wanted = [STAYER.encode(), tag.encode()]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[2:4] == wanted and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@needs_namespaces
@pytest.mark.parametrize("ending", ["destroy", "stop"])
def test_a_process_that_left_with_setsid_ignores_term_and_dropped_its_marker_ends_too(
    tmp_path: Path, ending: str
) -> None:
    runner = ProcessRunner(tmp_path / "containers", stop_grace=1.0)
    assert runner.contained
    sim = Sim(
        market=small_market(), clock=RealClock(), api_key=KEY, runner=runner, timing=Timing.fast()
    )
    tag = f"stayer-{tmp_path.name}"
    with (
        serve(sim, step_interval=0.02) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        body = {
            "image": IMAGE,
            "runtype": "args",
            "args": [sys.executable, "-c", LEAVER, STAYER, tag],
        }
        answer = http.put(f"/api/v0/asks/{offer_on(http, 1)}/", json=body).json()
        instance_id = answer["new_contract"]
        workspace = runner.workspace(instance_id)
        wait_for(lambda: (workspace / "pid1").exists() and (workspace / "stayer").exists())
        [stayer] = wait_for(lambda: stayers(tag))
        try:
            environ = Path(f"/proc/{stayer}/environ").read_bytes()
            assert MARKER.encode() not in environ  # the marker sweep cannot find it
            pid1 = runner.pid(instance_id)
            assert pid1 is not None
            assert stayer not in group_pids(pid1)  # nor can a kill of PID 1's group
            assert stayer in runner.pids(instance_id)  # the runner knows it is the container's
            inside = int((workspace / "stayer").read_text())
            assert runner.host_pid(instance_id, inside) == stayer
            if ending == "destroy":
                assert http.delete(f"/api/v0/instances/{instance_id}/").json()["success"]
            else:
                http.put(f"/api/v0/instances/{instance_id}/", json={"state": "stopped"})
            # stop: PID 1 has no TERM handler, so the kernel drops the TERM; KILL after the grace
            wait_for(lambda: not alive(stayer), 10)  # it ends with its container
            # PID 1 is gone once the runner has reaped it (a step later: a CI run looked first)
            wait_for(lambda: not alive(pid1), 10)
            assert runner.pids(instance_id) == []
        finally:
            for pid in stayers(tag):  # the old runner leaves it behind: do not leak it
                os.kill(pid, signal.SIGKILL)


@needs_namespaces
def test_pid_1_is_pid_1_with_a_proc_of_its_own_and_the_hosts_loopback(tmp_path: Path) -> None:
    script = (
        "import json, os, urllib.error, urllib.request\n"
        "seen = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "stat = open('/proc/self/stat').read().split()\n"
        "try:\n"
        "    up = urllib.request.urlopen(os.environ['VAST_URL'] + '/', timeout=10).status\n"
        "except urllib.error.HTTPError as answer:\n"
        "    up = answer.code\n"
        "json.dump({'pid': os.getpid(), 'seen': seen, 'self': int(stat[0]),"
        " 'sid': os.getsid(0), 'reached': up, 'tmpdir': os.environ['TMPDIR']},"
        " open('me.tmp', 'w'))\n"
        "os.rename('me.tmp', 'me.json')\n"
        "import time\n"
        "time.sleep(1000)\n"
    )
    body = {"image": IMAGE, "runtype": "args", "args": [sys.executable, "-c", script]}
    runner = ProcessRunner(tmp_path / "containers")
    sim = Sim(
        market=small_market(), clock=RealClock(), api_key=KEY, runner=runner, timing=Timing.fast()
    )
    with (
        serve(sim, step_interval=0.02) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}) as http,
    ):
        answer = http.put(f"/api/v0/asks/{offer_on(http, 1)}/", json=body).json()
        instance_id = answer["new_contract"]
        me = wait_for(lambda: read_json(runner.workspace(instance_id) / "me.json"))
        assert me["pid"] == 1 and me["self"] == 1 and me["sid"] == 1
        assert me["seen"] == [1]  # its /proc shows its own namespace only
        assert me["reached"] in (200, 404)  # the simulator on the host's loopback answered
        assert runner.host_pid(instance_id, 1) == runner.pid(instance_id) != 1
        # a TMPDIR of its own (Ray's temp dir goes there), short, and gone with the instance
        own = Path(me["tmpdir"])
        assert own == runner.tmpdir(instance_id) and own.is_dir() and len(str(own)) < 40
        http.delete(f"/api/v0/instances/{instance_id}/")
        wait_for(lambda: not own.exists())


def test_without_root_there_are_no_namespaces_and_the_runner_says_so() -> None:
    """EPERM (not root): detected once, logged, and containers fall back to process groups."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and util-linux setpriv to become nobody")
    with tempfile.TemporaryDirectory(prefix="vastsim-nobody-") as scratch:  # basetemp is 0700
        os.chmod(scratch, 0o777)
        probe = (
            "import logging, sys\n"
            "logging.basicConfig(stream=sys.stdout, format='%(message)s')\n"
            "from vastsim.containers.pidns import no_namespaces\n"
            "from vastsim.containers.runner import ProcessRunner\n"
            f"runner = ProcessRunner({str(Path(scratch) / 'c')!r})\n"
            "print('contained', runner.contained)\n"
            "print('again', ProcessRunner(runner.workdir).contained, no_namespaces())\n"
        )
        nobody = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        done = subprocess.run(
            [*nobody, sys.executable, "-c", probe],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if "contained" not in done.stdout and "Permission denied" in done.stderr:
        pytest.skip(f"nobody cannot run this Python: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "contained False" in done.stdout
    assert done.stdout.count("containers get no PID namespace") == 1  # probed once
    assert "Operation not permitted" in done.stdout
