"""The pipeline template end to end, with no GitHub: a bare spec repository whose post-receive
hook records each push, the template's own jobs run for each push by the local runner
(tests/ci/runner.py), a fake forge that records statuses and comments (tests/ci/forge.py), a
served vastsim for vast, and the shared state in a real PostgreSQL (and in SQLite).

Shown: the plan reviewed on a pull request is what its merge applies, exactly (vastsim sees the
plan's creates and nothing else); a second pull request of the same cluster, planned before the
first merged, is refused on its merge with exit 3 and no call that changes vast; the plan job
keeps one comment per pull request however often it runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler import planfile
from reconciler.model.plan import ActionKind
from tests.ci import gitrepo
from tests.ci.forge import Forge
from tests.ci.runner import Event, JobResult, Runner, event_for_push, skip_setup
from tests.pgserver import PgServer
from tests.served import API_KEY, LOCAL_SIM, World

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "ci" / "github" / "ray-vast.yml"
HOOK = """#!/bin/sh
while read old new ref; do echo "$old $new $ref" >> "{events}"; done
"""
MUTATING = (
    "PUT /api/v0/asks/{id}/",
    "DELETE /api/v0/instances/{id}/",
    "PUT /api/v0/instances/{id}/",
)


def spec(cpu_min: int = 0, gpu_max: int = 1) -> str:
    text = LOCAL_SIM.read_text()
    text = text.replace(
        "      min_workers: 1           # keep one", f"      min_workers: {cpu_min}  # keep"
    )
    return text.replace("      max_workers: 1\n", f"      max_workers: {gpu_max}\n")


@dataclass
class Pipeline:
    """A spec repository, its pushes, and the runner that answers them."""

    bare: Path
    work: Path
    events: Path
    runner: Runner
    seen: int = 0

    def push(self, branch: str) -> dict[str, JobResult]:
        """Push `branch` and run the jobs of every push the hook recorded."""
        gitrepo.git(self.work, "push", "--quiet", "origin", f"{branch}:{branch}")
        lines = self.events.read_text().splitlines()
        new, self.seen = lines[self.seen :], len(lines)
        results: dict[str, JobResult] = {}
        for line in new:
            _old, sha, ref = line.split()
            event = event_for_push(ref, sha, pr_number=number_of(ref))
            results |= self.runner.run(TEMPLATE, event)
        return results

    def branch(self, name: str, files: dict[str, str], base: str = "main") -> str:
        gitrepo.git(self.work, "checkout", "--quiet", "-B", name, base)
        return gitrepo.commit(self.work, files, f"{name}: change the cluster")

    def merge(self, name: str) -> str:
        gitrepo.git(self.work, "checkout", "--quiet", "main")
        gitrepo.git(self.work, "merge", "--quiet", "--no-ff", "-m", f"Merge {name}", name)
        return gitrepo.git(self.work, "rev-parse", "HEAD")


def number_of(ref: str) -> int:
    """The pull request number of a branch (one per branch, as a forge gives)."""
    return 1 + sum(ord(c) for c in ref) % 97


def state_url(kind: str, tmp_path: Path, server: PgServer | None) -> str:
    if server is None:
        return f"sqlite://{tmp_path / 'shared' / 'state.db'}"
    database = "pipe_" + uuid.uuid4().hex[:10]
    server.new_database(database)
    return f"postgresql://{server.user}@127.0.0.1:{server.port}/{database}"


@pytest.fixture(params=["postgresql", "sqlite"])
def pipeline(
    request: pytest.FixtureRequest, world: World, tmp_path: Path
) -> Iterator[tuple[Pipeline, Forge]]:
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None
    bare = gitrepo.init(tmp_path / "specs.git", bare=True)
    events = tmp_path / "pushes.log"
    events.touch()
    hook = bare / "hooks" / "post-receive"
    hook.write_text(HOOK.format(events=events))
    hook.chmod(0o755)
    work = gitrepo.init(tmp_path / "work")
    gitrepo.git(work, "remote", "add", "origin", str(bare))
    gitrepo.commit(work, {"clusters/local-sim.yaml": spec()}, "the cluster, idle")
    gitrepo.git(work, "push", "--quiet", "origin", "main")  # before the pipeline existed
    events.write_text("")
    with Forge() as forge:
        secrets = {
            "RAY_VAST_STATE_URL": state_url(request.param, tmp_path, server),
            "VAST_API_KEY_READONLY": API_KEY,
            "VAST_API_KEY": API_KEY,
        }
        host = {"VAST_URL": world.server.url, "RAY_VAST_PACING": "off"}
        runner = Runner(
            bare,
            tmp_path / "runs",
            secrets=secrets,
            vars={"RAY_VAST_VERSION": "0+test"},
            api_url=forge.url,
            token=forge.token,
            skip=skip_setup,
            host_env=host,
        )
        with runner:
            yield Pipeline(bare, work, events, runner), forge


def mutations(world: World) -> int:
    return sum(1 for r in world.sim.requests if r.route in MUTATING)


def test_the_reviewed_plan_is_applied_exactly_and_a_stale_one_is_refused(
    pipeline: tuple[Pipeline, Forge], world: World
) -> None:
    pipe, forge = pipeline
    head_a = pipe.branch("scale-up", {"clusters/local-sim.yaml": spec(cpu_min=1)})
    pr = pipe.push("scale-up")["plan"]
    assert pr.ok, [(s.name, s.code, s.output[-2000:]) for s in pr.steps]
    saved = planfile.read(pr.workdir / "ray-vast.plan")
    rents = {a.label for a in saved.plan.actions if a.kind is ActionKind.RENT}
    assert len(rents) == 2 and world.sim.instances == {}  # a plan changes nothing at vast
    (status,) = forge.statuses_of(head_a)
    assert (status["context"], status["state"]) == ("ray-vast/plan", "success")
    assert "2 to rent" in status["description"]

    # pushed again: the one comment is edited, never a second; the newer plan is the reviewed one
    pipe.branch("scale-up", {"clusters/notes.md": "why we scale\n"}, base="scale-up")
    second = pipe.push("scale-up")["plan"]
    assert second.ok
    (comment,) = forge.comments_on(number_of("refs/heads/scale-up"))
    assert "ray-vast plan" in comment["body"] and "2 to rent" in comment["body"]
    saved = planfile.read(second.workdir / "ray-vast.plan")
    rents = {a.label for a in saved.plan.actions if a.kind is ActionKind.RENT}

    # a second pull request of the same cluster, planned before the first merges
    pipe.branch("more-gpus", {"clusters/local-sim.yaml": spec(gpu_max=2)})
    assert pipe.push("more-gpus")["plan"].ok

    merged_a = pipe.merge("scale-up")
    before = mutations(world)
    apply_a = pipe.push("main")["apply"]
    assert apply_a.ok, apply_a.step("Apply the reviewed plan").output[-3000:]
    assert {i.label for i in world.sim.instances.values()} == rents  # exactly the plan's creates
    assert mutations(world) - before == len(rents)
    assert forge.statuses_of(merged_a)[-1]["state"] == "success"

    merged_b = pipe.merge("more-gpus")  # its tree is A's change and B's: no PR planned it
    before, instances = mutations(world), set(world.sim.instances)
    apply_b = pipe.push("main")["apply"]
    step = apply_b.step("Apply the reviewed plan")
    assert step.code == 3, step.output[-3000:]
    assert "No reviewed plan" in step.output
    assert mutations(world) == before and set(world.sim.instances) == instances
    last = forge.statuses_of(merged_b)[-1]
    assert (last["context"], last["state"]) == ("ray-vast/apply", "failure")
    assert "stale" in last["description"]


def test_a_merge_applies_only_the_tree_that_was_reviewed(
    pipeline: tuple[Pipeline, Forge], world: World
) -> None:
    pipe, _forge = pipeline
    pipe.branch("scale-up", {"clusters/local-sim.yaml": spec(cpu_min=1)})
    assert pipe.push("scale-up")["plan"].ok
    # the merge brings one more change than the pull request had: its tree was never reviewed
    pipe.merge("scale-up")
    gitrepo.commit(pipe.work, {"clusters/local-sim.yaml": spec(cpu_min=2)}, "a late edit")
    step = pipe.push("main")["apply"].step("Apply the reviewed plan")
    assert step.code == 3 and world.sim.instances == {}
    # the reviewed tree itself, merged alone, applies
    gitrepo.git(pipe.work, "reset", "--quiet", "--hard", "HEAD~1")
    gitrepo.git(pipe.work, "push", "--quiet", "--force", "origin", "main")
    pipe.seen = len(pipe.events.read_text().splitlines())
    sha = gitrepo.git(pipe.work, "rev-parse", "HEAD")
    again = pipe.runner.run(TEMPLATE, Event("push", sha, "main"))["apply"]
    assert again.ok, again.step("Apply the reviewed plan").output[-3000:]
    assert len(world.sim.instances) == 2
