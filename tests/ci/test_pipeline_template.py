"""The pipeline template users copy (ci/github/ray-vast.yml): lint-clean, least privilege, and
the reviewed-plan flow: the PR plans for review and reports; main applies that plan, never a new
one, and reports whatever the outcome.

Static checks run the two offline linters of the test extra (zizmor, check-jsonschema) and read
the YAML; the flow checks run the template's own jobs through the local runner (runner.py) with
a stand-in `ray-vast` that records its calls, so the steps' shell is tested as written.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from reconciler.cli import app
from tests.ci import gitrepo
from tests.ci.runner import JobResult, Runner, event_for_push, skip_setup

TEMPLATE = Path(__file__).parents[2] / "ci" / "github" / "ray-vast.yml"
BIN = Path(sys.executable).parent
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "(", ")", "2>", "2>&1"}
SECRETS = {
    "RAY_VAST_STATE_URL": "postgresql://ci@db.invalid/rv",
    "VAST_API_KEY_READONLY": "key-read",
    "VAST_API_KEY": "key-write",
}


def workflow() -> dict[Any, Any]:
    """The template, parsed."""
    loaded: dict[Any, Any] = yaml.safe_load(TEMPLATE.read_text())
    return loaded


def job(event: str) -> dict[str, Any]:
    """The one job whose `if:` selects `event` (`pull_request` or `push`)."""
    jobs: list[dict[str, Any]] = list(workflow()["jobs"].values())
    found = [j for j in jobs if f"== '{event}'" in j.get("if", "")]
    assert len(found) == 1, f"one job for {event}, found {len(found)}"
    return found[0]


def commands(*jobs: dict[str, Any]) -> list[list[str]]:
    """Every `ray-vast ...` command the jobs' `run:` steps run (all jobs when none given)."""
    found = []
    for each in jobs or tuple(workflow()["jobs"].values()):
        for step in each["steps"]:
            for line in step.get("run", "").splitlines():
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                segment: list[str] = []
                for word in [*lexer, ";"]:
                    if word not in OPERATORS:
                        segment.append(word)
                        continue
                    if segment[:1] == ["ray-vast"]:
                        found.append(segment)
                    segment = []
    return found


def linter(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a linter of the test extra from this interpreter's environment."""
    tool = BIN / name
    assert tool.exists(), f"{name} missing: pip install -e '.[test]'"
    return subprocess.run(
        [str(tool), *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_zizmor_finds_nothing() -> None:
    done = linter("zizmor", "--offline", "--no-config", str(TEMPLATE))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_github_workflow_schema_accepts_it() -> None:
    done = linter("check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(TEMPLATE))
    assert done.returncode == 0, done.stdout + done.stderr


def test_plans_on_pull_requests_and_applies_on_main() -> None:
    triggers = workflow()[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    assert (
        "pull_request_target" not in triggers and "pull_request_target" not in TEMPLATE.read_text()
    )
    assert "vars.RAY_VAST_APPLY != 'false'" in job("push")["if"]


def test_permissions_are_least_privilege() -> None:
    assert workflow()["permissions"] in ({}, {"contents": "read"})
    assert job("pull_request")["permissions"] == {
        "contents": "read",
        "statuses": "write",
        "pull-requests": "write",
    }
    assert job("push")["permissions"] == {"contents": "read", "statuses": "write"}


def test_checkouts_keep_no_credentials() -> None:
    steps = [s for j in workflow()["jobs"].values() for s in j["steps"]]
    checkouts = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkouts and all(
        s.get("with", {}).get("persist-credentials") is False for s in checkouts
    )


def test_every_action_is_pinned_to_a_commit() -> None:
    lines = [line.strip() for line in TEMPLATE.read_text().splitlines()]
    uses = [line for line in lines if re.match(r"^(- )?uses:", line)]
    pinned = re.compile(r"^(- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")
    assert uses and [u for u in uses if not pinned.match(u)] == []


def test_no_expression_inside_a_run_body() -> None:
    runs = [s["run"] for j in workflow()["jobs"].values() for s in j["steps"] if "run" in s]
    assert runs and [r for r in runs if "${{" in r] == []


def test_each_job_gets_only_its_own_vast_key() -> None:
    assert "VAST_API_KEY" not in workflow().get("env", {})
    plan, apply = job("pull_request"), job("push")
    assert plan["env"]["VAST_API_KEY"] == "${{ secrets.VAST_API_KEY_READONLY }}"
    assert apply["env"]["VAST_API_KEY"] == "${{ secrets.VAST_API_KEY }}"
    assert "secrets.VAST_API_KEY }}" not in yaml.safe_dump(plan)
    assert "VAST_API_KEY_READONLY" not in yaml.safe_dump(apply)
    step_envs = [s.get("env", {}) for j in (plan, apply) for s in j["steps"]]
    assert all("VAST_API_KEY" not in env for env in step_envs)


def test_the_state_is_shared_so_any_runner_works() -> None:
    assert workflow()["env"]["RAY_VAST_STATE_URL"] == "${{ secrets.RAY_VAST_STATE_URL }}"
    assert all(j["runs-on"] == "ubuntu-latest" for j in workflow()["jobs"].values())
    assert "RAY_VAST_STATE_DIR" not in TEMPLATE.read_text()


def test_each_job_installs_the_pinned_ray_vast() -> None:
    for each in workflow()["jobs"].values():
        installs = [s for s in each["steps"] if "python -m pip install" in s.get("run", "")]
        assert len(installs) == 1 and "ray-vast==" in installs[0]["run"]
        names = set(re.findall(r"\$\{?(\w+)", installs[0]["run"]))
        pinned = {k: v for k, v in installs[0].get("env", {}).items() if k in names}
        assert pinned and all(re.fullmatch(r"\$\{\{ vars\.\w+ \}\}", v) for v in pinned.values())


def test_applies_are_serialised_and_never_cancelled() -> None:
    assert job("push")["concurrency"] == {"group": "ray-vast-apply", "cancel-in-progress": False}


def test_the_header_names_what_the_template_needs() -> None:
    text = TEMPLATE.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    needed = set(re.findall(r"(?:secrets|vars)\.(\w+)", text))
    assert needed and [n for n in needed if n not in header] == []
    assert "pip install ray-vast" in header and "watch --git" in header
    assert "self-hosted" not in text


def test_a_pull_request_validates_plans_for_review_and_reports() -> None:
    assert commands(job("pull_request")) == [
        ["ray-vast", "validate", "clusters"],
        [
            "ray-vast",
            *("plan", "clusters", "-out", "ray-vast.plan", "--detailed-exitcode", "--review"),
        ],
        ["ray-vast", "report", "--plan", "ray-vast.plan"],
    ]


def test_main_applies_the_reviewed_plan_and_never_plans() -> None:
    applied = commands(job("push"))
    assert [c[1:4] for c in applied if c[1] == "apply"] == [["apply", "--reviewed", "clusters"]]
    assert [c for c in applied if c[1] == "plan"] == []
    assert ["ray-vast", "report", "--applied", "$code"] in applied


def test_every_command_and_option_exists() -> None:
    cli = get_command(app)
    for argv in commands():
        sub = cli.commands[argv[1]]  # type: ignore[attr-defined]
        known = {o for p in sub.params for o in (*p.opts, *p.secondary_opts)}
        for word in argv[2:]:
            if word.startswith("-"):
                assert word in known, f"{argv[1]} has no option {word}"


def stand_in(folder: Path, codes: dict[str, int]) -> Path:
    """A `ray-vast` that logs each call (argv and the env that matters) and exits with
    `codes[subcommand]` (0 by default); the log's path."""
    folder.mkdir(parents=True)
    log = folder / "calls.log"
    cases = "".join(f"  {name}) exit {code};;\n" for name, code in codes.items())
    script = folder / "ray-vast"
    script.write_text(
        "#!/bin/bash\n"
        f'echo "$* | key=$VAST_API_KEY state=$RAY_VAST_STATE_URL token=$GITHUB_TOKEN" >> {log}\n'
        'if [ "$1" = plan ]; then echo "Plan: 1 to add"; fi\n'
        f'case "$1" in\n{cases}esac\n'
    )
    script.chmod(0o755)
    return log


def run_template(
    tmp_path: Path, ref: str, codes: dict[str, int], **variables: str
) -> tuple[dict[str, JobResult], list[str]]:
    """Run the template for a push of one commit to `ref`: the jobs that ran, and the calls."""
    repo = gitrepo.init(tmp_path / "specs")
    sha = gitrepo.commit(repo, {"clusters/train.yaml": "name: train\n"})
    log = stand_in(tmp_path / "bin", codes)
    with Runner(
        repo,
        tmp_path / "runs",
        secrets=SECRETS,
        vars={"RAY_VAST_VERSION": "0.1.0", **variables},
        skip=skip_setup,
        bin_dirs=(log.parent,),
        token="ghs_t",
    ) as runner:
        results = runner.run(TEMPLATE, event_for_push(ref, sha))
    return results, log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(("planned", "passes"), [(0, True), (2, True), (1, False)])
def test_the_plan_job_fails_only_on_an_error(tmp_path: Path, planned: int, passes: bool) -> None:
    jobs, calls = run_template(tmp_path, "refs/heads/feature", {"plan": planned})
    [plan] = jobs.values()
    env = f"key={SECRETS['VAST_API_KEY_READONLY']} state={SECRETS['RAY_VAST_STATE_URL']}"
    expected = [
        "validate clusters",
        "plan clusters -out ray-vast.plan --detailed-exitcode --review",
        *(["report --plan ray-vast.plan"] if passes else []),
    ]
    assert calls == [f"{c} | {env} token=ghs_t" for c in expected]
    assert plan.ok is passes and "Plan: 1 to add" in plan.summary


@pytest.mark.parametrize("applied", [0, 3, 1])
def test_the_apply_is_reported_whatever_its_outcome(tmp_path: Path, applied: int) -> None:
    jobs, calls = run_template(tmp_path, "refs/heads/main", {"apply": applied})
    [apply] = jobs.values()
    env = f"key={SECRETS['VAST_API_KEY']} state={SECRETS['RAY_VAST_STATE_URL']} token=ghs_t"
    assert calls == [
        f"apply --reviewed clusters --lock-timeout 300 | {env}",
        f"report --applied {applied} | {env}",
    ]
    assert apply.steps[-1].code == applied and apply.ok is (applied == 0)


def test_a_watch_on_the_head_takes_the_applies(tmp_path: Path) -> None:
    jobs, calls = run_template(tmp_path, "refs/heads/main", {}, RAY_VAST_APPLY="false")
    assert jobs == {} and calls == []
