"""`watch --git` sets the commit status `ray-vast/reconcile` on each revision it takes (Flux's
notification): success for specs it reconciles, failure for specs that do not load; the fake
forge (tests/ci/forge.py) records them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from bench.live import free_port
from tests.ci import gitrepo
from tests.ci.forge import Forge
from tests.served import LOCAL_SIM, ROOT, World
from tests.waiting import wait_for


def test_each_revision_taken_gets_its_commit_status(world: World, tmp_path: Path) -> None:
    port = free_port()
    text = LOCAL_SIM.read_text().replace("metrics_port: 19464", f"metrics_port: {port}")
    bare = gitrepo.init(tmp_path / "specs.git", bare=True)
    work = gitrepo.init(tmp_path / "work")
    gitrepo.git(work, "remote", "add", "origin", str(bare))
    good = gitrepo.commit(work, {"local-sim.yaml": text}, "one worker")
    gitrepo.git(work, "push", "--quiet", "origin", "main")
    with Forge() as forge:
        env = {
            **world.env,
            "GITHUB_API_URL": forge.url,
            "GITHUB_REPOSITORY": "owner/specs",
            "GITHUB_TOKEN": forge.token,
        }
        argv = [sys.executable, "-m", "reconciler", "watch", str(tmp_path / "checkout"), "--git",
                str(bare), "--branch", "main", "--git-interval", "5", "--state-dir",
                str(world.state_dir)]  # fmt: skip
        proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: forge.statuses_of(good), 60, "the first revision's status")
            broken = gitrepo.commit(
                work, {"local-sim.yaml": text.replace("max_workers: 2", "max_workers: nope")}
            )
            gitrepo.git(work, "push", "--quiet", "origin", "main")
            wait_for(lambda: forge.statuses_of(broken), 60, "the broken revision's status")
            fixed = gitrepo.commit(
                work, {"local-sim.yaml": text.replace("min_workers: 1 ", "min_workers: 0 ")}
            )
            gitrepo.git(work, "push", "--quiet", "origin", "main")
            wait_for(lambda: forge.statuses_of(fixed), 60, "the fixed revision's status")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        states = {sha: [(s["context"], s["state"]) for s in forge.statuses_of(sha)]
                  for sha in (good, broken, fixed)}  # fmt: skip
    assert states == {
        good: [("ray-vast/reconcile", "success")],
        broken: [("ray-vast/reconcile", "failure")],
        fixed: [("ray-vast/reconcile", "success")],
    }
    assert world.run("down", "local-sim", "--auto-approve").returncode == 0
