"""The pipeline harness itself: the local runner on a toy workflow, and the fake forge.

The end-to-end test of the CI flow trusts these two stand-ins for GitHub, so they are tested
here on their own: which jobs an event runs, env and outputs, `${{ }}` substitution, checkout at
the sha, artifacts, failing steps; and the forge's statuses, comments and token check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ci import gitrepo
from tests.ci.expressions import Unsupported
from tests.ci.forge import Forge
from tests.ci.runner import Event, Runner, event_for_push, skip_setup

TOY = """\
name: toy
on:
  pull_request:
  push:
    branches: [main]
env:
  TOP: top-${{ vars.COLOUR }}
jobs:
  check:
    if: github.event_name == 'pull_request'
    runs-on: ubuntu-latest
    env:
      KEY: ${{ secrets.READ_KEY }}
    steps:
      - uses: actions/checkout@0000000000000000000000000000000000000000 # v0.0.0
        with:
          persist-credentials: false
      - uses: actions/setup-python@0000000000000000000000000000000000000000 # v0.0.0
      - name: Install
        run: python -m pip install nothing-at-all
      - name: Facts
        id: facts
        env:
          SHA: ${{ github.sha }}
          PR: ${{ github.event.pull_request.number }}
        run: |
          echo "top=$TOP key=$KEY sha=$SHA pr=$PR event=$GITHUB_EVENT_NAME ref=$GITHUB_REF"
          echo "spec=$(cat clusters/a.yaml)" >> "$GITHUB_OUTPUT"
          echo "LATER=from-env-file" >> "$GITHUB_ENV"
          echo "## facts" >> "$GITHUB_STEP_SUMMARY"
      - name: Later
        env:
          SPEC: ${{ steps.facts.outputs.spec }}
        run: echo "spec=$SPEC later=$LATER path0=${PATH%%:*}"
      - uses: actions/upload-artifact@0000000000000000000000000000000000000000 # v0.0.0
        with:
          name: specs
          path: clusters/a.yaml
  deploy:
    if: github.event_name == 'push' && vars.DEPLOY != 'false'
    runs-on: ubuntu-latest
    env:
      KEY: ${{ secrets.WRITE_KEY }}
    steps:
      - uses: actions/checkout@0000000000000000000000000000000000000000 # v0.0.0
      - uses: actions/download-artifact@0000000000000000000000000000000000000000 # v0.0.0
        with:
          name: specs
          path: reviewed
      - name: Fail
        run: |
          echo "key=$KEY reviewed=$(cat reviewed/a.yaml)"
          exit 3
      - name: Never
        run: echo never
      - name: Tolerated
        if: always()
        continue-on-error: true
        run: exit 5
      - name: Cleanup
        if: always()
        run: echo cleaned
"""


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A repository with two commits of clusters/a.yaml, and the toy workflow beside it."""
    repo = gitrepo.init(tmp_path / "repo")
    shas = [gitrepo.commit(repo, {"clusters/a.yaml": f"v{n}\n"}) for n in (1, 2)]
    workflow = tmp_path / "toy.yml"
    workflow.write_text(TOY)
    return repo, workflow, shas


def runner(tmp_path: Path, repo: Path, **overrides: Any) -> Runner:
    """A runner on `repo` with the toy's secrets and vars."""
    settings: dict[str, Any] = {
        "secrets": {"READ_KEY": "read-only", "WRITE_KEY": "write"},
        "vars": {"COLOUR": "blue"},
        "skip": skip_setup,
    }
    return Runner(repo, tmp_path / "runs", **(settings | overrides))


def test_a_push_to_main_is_push_and_to_a_branch_a_pull_request() -> None:
    assert event_for_push("refs/heads/main", "a" * 40).name == "push"
    pr = event_for_push("refs/heads/feature", "b" * 40, pr_number=7)
    assert (pr.name, pr.head_sha, pr.ref, pr.branch) == (
        "pull_request",
        "b" * 40,
        "refs/pull/7/merge",
        "feature",
    )


def test_a_pull_request_runs_only_its_job_with_env_outputs_and_summary(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    with runner(tmp_path, repo) as run:
        results = run.run(workflow, Event("pull_request", shas[0], "feature", pr_number=4))
    assert set(results) == {"check"}
    job = results["check"]
    assert job.ok and [s.code for s in job.steps] == [0, None, None, 0, 0, 0]
    facts = job.step("Facts")
    assert f"top=top-blue key=read-only sha={shas[0]} pr=4" in facts.output
    assert "event=pull_request ref=refs/pull/4/merge" in facts.output
    assert facts.outputs == {"spec": "v1"}
    later = job.step("Later").output
    assert f"spec=v1 later=from-env-file path0={Path(sys.executable).parent}" in later
    assert job.summary == "## facts\n"


def test_checkout_is_a_worktree_at_the_sha_removed_afterwards(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    with runner(tmp_path, repo) as run:
        job = run.run(workflow, Event("pull_request", shas[0], "feature"))["check"]
        assert gitrepo.git(job.workdir, "rev-parse", "HEAD") == shas[0]
        assert (job.workdir / "clusters" / "a.yaml").read_text() == "v1\n"
        assert str(job.workdir) in gitrepo.git(repo, "worktree", "list")
    assert str(job.workdir) not in gitrepo.git(repo, "worktree", "list")


def test_a_bare_repository_is_cloned_at_the_sha(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    bare = gitrepo.init(tmp_path / "bare.git", bare=True)
    gitrepo.git(repo, "push", "--quiet", str(bare), "main")
    with runner(tmp_path, bare) as run:
        job = run.run(workflow, Event("pull_request", shas[0], "feature"))["check"]
    assert job.ok and (job.workdir / "clusters" / "a.yaml").read_text() == "v1\n"


def test_the_event_file_carries_the_pull_request(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    workflow.write_text(TOY.replace('echo "top=', 'cat "$GITHUB_EVENT_PATH"; echo; echo "top='))
    with runner(tmp_path, repo) as run:
        event = Event("pull_request", shas[1], "feature", pr_number=9, head_sha=shas[0])
        output = run.run(workflow, event)["check"].step("Facts").output
    sent = json.loads(output.splitlines()[0])
    assert sent["pull_request"]["number"] == 9 and sent["pull_request"]["head"]["sha"] == shas[0]


def test_a_failing_step_stops_its_job_and_reports_its_code(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    with runner(tmp_path, repo) as run:
        run.run(workflow, Event("pull_request", shas[0], "feature"))
        results = run.run(workflow, event_for_push("refs/heads/main", shas[1]))
        checked_out = (results["deploy"].workdir / "clusters" / "a.yaml").read_text()
    assert set(results) == {"deploy"} and checked_out == "v2\n"
    job = results["deploy"]
    codes = {s.name: s.code for s in job.steps}
    assert codes == {
        "actions/checkout": 0,
        "actions/download-artifact": 0,
        "Fail": 3,
        "Never": None,
        "Tolerated": 5,
        "Cleanup": 0,
    }
    assert not job.ok
    assert "key=write reviewed=v1" in job.step("Fail").output  # the artifact of the PR run


def test_vars_in_a_job_condition_and_branch_filters(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    with runner(tmp_path, repo, vars={"DEPLOY": "false"}) as run:
        assert run.run(workflow, event_for_push("refs/heads/main", shas[1])) == {}
        assert run.run(workflow, Event("push", shas[1], "other")) == {}


def test_an_action_with_no_stand_in_raises(
    tmp_path: Path, toy: tuple[Path, Path, list[str]]
) -> None:
    repo, workflow, shas = toy
    with runner(tmp_path, repo, skip=lambda step: False) as run, pytest.raises(Unsupported):
        run.run(workflow, Event("pull_request", shas[0], "feature"))


def test_the_forge_records_statuses_and_comments() -> None:
    sha = "c" * 40
    with Forge(token="t0k") as forge, httpx.Client(base_url=forge.url) as client:
        auth = {"Authorization": "Bearer t0k"}
        status = {"state": "success", "context": "ray-vast/plan", "description": "2 to add"}
        posted = client.post(f"/repos/o/r/statuses/{sha}", json=status, headers=auth)
        assert posted.status_code == 201
        made = client.post("/repos/o/r/issues/3/comments", json={"body": "one"}, headers=auth)
        comment_id = made.json()["id"]
        edit = {"body": "two"}
        edited = client.patch(f"/repos/o/r/issues/comments/{comment_id}", json=edit, headers=auth)
        assert edited.status_code == 200
        listed = client.get("/repos/o/r/issues/3/comments", headers={"Authorization": "token t0k"})
        statuses = client.get(f"/repos/o/r/commits/{sha}/statuses", headers=auth).json()
    assert [c["body"] for c in listed.json()] == ["two"]
    assert forge.statuses_of(sha)[0] | status == forge.statuses_of(sha)[0]
    assert [s["context"] for s in statuses] == ["ray-vast/plan"]
    assert [(c.method, c.path, c.body, c.status) for c in forge.calls] == [
        ("POST", f"/repos/o/r/statuses/{sha}", status, 201),
        ("POST", "/repos/o/r/issues/3/comments", {"body": "one"}, 201),
        ("PATCH", f"/repos/o/r/issues/comments/{comment_id}", {"body": "two"}, 200),
        ("GET", "/repos/o/r/issues/3/comments", None, 200),
        ("GET", f"/repos/o/r/commits/{sha}/statuses", None, 200),
    ]


def test_the_forge_wants_the_token() -> None:
    with Forge(token="t0k") as forge, httpx.Client(base_url=forge.url) as client:
        status = {"state": "success", "context": "ray-vast/plan"}
        bare = client.post(f"/repos/o/r/statuses/{'d' * 40}", json=status)
        wrong = client.post(
            "/repos/o/r/issues/1/comments", json={"body": "x"}, headers={"Authorization": "token x"}
        )
        assert (bare.status_code, wrong.status_code) == (401, 401)
        assert not forge.statuses and not forge.comments and len(forge.calls) == 2
        bad = client.post(
            f"/repos/o/r/statuses/{'d' * 40}",
            json={"state": "green"},
            headers={"Authorization": "Bearer t0k"},
        )
        missing = client.patch(
            "/repos/o/r/issues/comments/99",
            json={"body": "x"},
            headers={"Authorization": "token t0k"},
        )
        assert (bad.status_code, missing.status_code) == (422, 404)


def test_the_forge_pages_comments() -> None:
    with Forge() as forge, httpx.Client(base_url=forge.url) as client:
        auth = {"Authorization": f"Bearer {forge.token}"}
        for n in range(3):
            client.post("/repos/o/r/issues/5/comments", json={"body": str(n)}, headers=auth)
        first = client.get("/repos/o/r/issues/5/comments?per_page=2", headers=auth)
        second = client.get(first.links["next"]["url"], headers=auth)
    assert [c["body"] for c in first.json()] == ["0", "1"]
    assert [c["body"] for c in second.json()] == ["2"] and "next" not in second.links
