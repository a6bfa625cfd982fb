"""A local GitHub Actions runner for the pipeline template's tests: no GitHub, no network.

`Runner.run(workflow, event)` reads a workflow file and runs, in file order, the jobs the event
selects: the workflow's `on:` (event names and `branches:`; `paths:` filters are not read, every
event counts as touching them), then each job's `if:` (the subset `expressions.py` evaluates).
`event_for_push` maps a push the way the flow under test sees one: to main is `push`, to any
other branch a `pull_request` from it.

Each `run:` step runs in a fresh process group under `bash -e` (or its `shell:`), in the job's
workspace, with the workflow, job and step `env:` merged after expressions are substituted, and
the GITHUB_* variables a hosted runner sets (GITHUB_OUTPUT, GITHUB_ENV, GITHUB_PATH and
GITHUB_STEP_SUMMARY files per step; GITHUB_EVENT_PATH a JSON payload); `bin_dirs` (by default
the bin folder of the Python running the tests, so the ray-vast under test) come first on PATH.
`uses:` steps are stubbed by `actions.py`; any other action (setup-python) and install steps must
be skipped by the caller's `skip` predicate (`skip_setup` skips both), or the run raises. A failed
step stops its job: later steps run only under `always()`/`failure()`; `continue-on-error: true`
keeps a failure from failing the job. Results give each step's exit code (None: not run) and its
output (stdout and stderr together).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from tests.ci import actions
from tests.ci.expressions import (
    Contexts,
    Status,
    Unsupported,
    condition,
    substitute,
    substitute_all,
    text,
)

# Host variables a step never inherits: a hosted runner would not have this machine's.
PRIVATE_PREFIXES = ("GITHUB_", "RUNNER_", "ACTIONS_", "VAST_", "RAY_VAST_")


@dataclass(frozen=True)
class Event:
    """What triggered a run. `sha` is GITHUB_SHA (what checkout gets); for a pull request,
    `head_sha` is the PR head (defaults to `sha`) and `branch` its branch."""

    name: str
    sha: str
    branch: str
    pr_number: int = 1
    head_sha: str = ""
    base: str = "main"

    @property
    def ref(self) -> str:
        """GITHUB_REF: the branch for a push, `refs/pull/N/merge` for a pull request."""
        if self.name == "pull_request":
            return f"refs/pull/{self.pr_number}/merge"
        return f"refs/heads/{self.branch}"


def event_for_push(ref: str, sha: str, *, main: str = "main", pr_number: int = 1) -> Event:
    """A push of `sha` to `ref`: to main the `push` event, to another branch a pull request."""
    branch = ref.removeprefix("refs/heads/")
    if branch == main:
        return Event("push", sha, branch, base=main)
    return Event("pull_request", sha, branch, pr_number=pr_number, head_sha=sha, base=main)


def payload(event: Event, repository: str) -> dict[str, Any]:
    """The webhook payload GITHUB_EVENT_PATH points at, with the fields a pipeline reads."""
    repo = {"full_name": repository, "name": repository.rsplit("/", maxsplit=1)[-1]}
    if event.name == "pull_request":
        return {
            "action": "synchronize",
            "number": event.pr_number,
            "pull_request": {
                "number": event.pr_number,
                "head": {"sha": event.head_sha or event.sha, "ref": event.branch},
                "base": {"ref": event.base},
            },
            "repository": repo,
        }
    return {"ref": event.ref, "after": event.sha, "repository": repo}


@dataclass
class StepResult:
    """One step: its exit code (None when it did not run), its output and its outputs."""

    name: str
    code: int | None
    output: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class JobResult:
    """One job that ran: its steps in order, its step summary, where it worked."""

    job_id: str
    workdir: Path
    steps: list[StepResult] = field(default_factory=list)
    summary: str = ""
    failed: bool = False

    @property
    def ok(self) -> bool:
        """Whether the job succeeded (failures under continue-on-error do not count)."""
        return not self.failed

    def step(self, name: str) -> StepResult:
        """The step of that name (or id, or `uses`)."""
        return next(s for s in self.steps if s.name == name)


def skip_setup(step: Mapping[str, Any]) -> bool:
    """Skip what a test machine already has: setup-python and `pip install` steps."""
    uses = str(step.get("uses", ""))
    return uses.startswith("actions/setup-python@") or "pip install" in str(step.get("run", ""))


def step_name(step: Mapping[str, Any]) -> str:
    """A step's name as GitHub shows it: its name, else its action, else its first line."""
    if "name" in step:
        return str(step["name"])
    if "uses" in step:
        return str(step["uses"]).split("@", maxsplit=1)[0]
    return str(step.get("run", "")).strip().splitlines()[0] if step.get("run") else "step"


def read_pairs(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT/GITHUB_ENV file: `NAME=value` lines and `NAME<<DELIM` blocks."""
    pairs: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    index = 0
    while index < len(lines):
        line = lines[index]
        heredoc = "<<" in line and ("=" not in line or line.index("<<") < line.index("="))
        if heredoc:
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, index + 1)
            pairs[name] = "\n".join(lines[index + 1 : end])
            index = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            pairs[name] = value
        index += 1
    return pairs


def shell_argv(shell: str | None, script: Path) -> list[str]:
    """The command GitHub runs a script with, for a `shell:` value (None: `bash -e`)."""
    known = {
        "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail", "{0}"],
        "sh": ["sh", "-e", "{0}"],
        "python": [sys.executable, "{0}"],
    }
    argv = ["bash", "-e", "{0}"] if shell is None else known.get(shell) or shell.split()
    return [str(script) if word == "{0}" else word for word in argv]


def run_process(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run a step in a process group of its own; kill the whole group when it ends or hangs."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return 124, output + f"\n(step killed after {timeout}s)\n"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # what the step left running, as GitHub does
    return code, output


def triggered(on: Any, event: Event) -> bool:
    """Whether the workflow's `on:` takes this event (names and `branches:` filters only)."""
    triggers: Mapping[str, Any] = (
        {on: None} if isinstance(on, str) else dict.fromkeys(on) if isinstance(on, list) else on
    )
    if event.name not in triggers:
        return False
    branches = (triggers[event.name] or {}).get("branches")
    target = event.base if event.name == "pull_request" else event.branch
    return branches is None or any(fnmatch(target, pattern) for pattern in branches)


def listed(value: Any) -> list[str]:
    """A `needs:` value as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


@dataclass
class Runner:
    """Runs workflows against one git repository; a `with` block removes its worktrees."""

    repository: Path
    workspace: Path
    secrets: Mapping[str, str] = field(default_factory=dict)
    vars: Mapping[str, str] = field(default_factory=dict)
    repository_name: str = "owner/specs"
    api_url: str = "http://127.0.0.1:9"
    server_url: str = "https://github.com"
    token: str = "ghs_test_token"
    artifacts: Path | None = None
    skip: Callable[[Mapping[str, Any]], bool] = lambda step: False
    bin_dirs: tuple[Path, ...] = (Path(sys.executable).parent,)
    host_env: Mapping[str, str] = field(default_factory=dict)
    step_timeout: float = 300.0
    runs: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.checkouts = actions.Checkouts(self.repository)
        self.store = self.artifacts or self.workspace / "artifacts"

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.checkouts.remove_all()

    def github(self, event: Event, workdir: Path) -> dict[str, Any]:
        """The `github` context of a run."""
        return {
            "event_name": event.name,
            "sha": event.sha,
            "ref": event.ref,
            "ref_name": event.ref.removeprefix("refs/heads/").removeprefix("refs/pull/"),
            "head_ref": event.branch if event.name == "pull_request" else "",
            "base_ref": event.base if event.name == "pull_request" else "",
            "repository": self.repository_name,
            "repository_owner": self.repository_name.split("/")[0],
            "token": self.token,
            "api_url": self.api_url,
            "server_url": self.server_url,
            "workspace": str(workdir),
            "run_id": str(1000 + self.runs),
            "run_number": str(self.runs),
            "run_attempt": "1",
            "actor": "tester",
            "event": payload(event, self.repository_name),
        }

    def run(self, workflow: Path, event: Event) -> dict[str, JobResult]:
        """Run the jobs `event` selects in `workflow`; the results of those that ran, by id."""
        spec = yaml.safe_load(workflow.read_text())
        on = spec.get("on", spec.get(True))  # YAML 1.1 reads the key `on` as True
        self.runs += 1
        results: dict[str, JobResult] = {}
        if not triggered(on, event):
            return results
        for job_id, job in spec["jobs"].items():
            home = self.workspace / f"run{self.runs}" / job_id
            contexts = Contexts(self.github(event, home / "work"), self.secrets, self.vars)
            needs = listed(job.get("needs"))
            blocked = any(n not in results or not results[n].ok for n in needs)
            if not condition(job.get("if"), contexts, Status(failed=blocked)):
                continue
            results[job_id] = self.run_job(job_id, job, spec, event, home)
        return results

    def run_job(
        self, job_id: str, job: Mapping[str, Any], spec: Mapping[str, Any], event: Event, home: Path
    ) -> JobResult:
        """Run one job's steps in order in `home`/work; stop at the first failure."""
        workdir, files = home / "work", home / "files"
        workdir.mkdir(parents=True)
        files.mkdir()
        event_path = files / "event.json"
        event_path.write_text(json.dumps(payload(event, self.repository_name)))
        github = self.github(event, workdir)
        env = substitute_all(spec.get("env"), Contexts(github, self.secrets, self.vars))
        env |= substitute_all(job.get("env"), Contexts(github, self.secrets, self.vars, env))
        defaults = {**(spec.get("defaults") or {}).get("run", {})}
        defaults |= (job.get("defaults") or {}).get("run", {})
        state = JobState(event, job_id, workdir, files, github, env, defaults)
        result = JobResult(job_id, workdir)
        for index, step in enumerate(job["steps"]):
            contexts = Contexts(github, self.secrets, self.vars, state.env, state.outputs)
            status = Status(failed=result.failed)
            if self.skip(step) or not condition(step.get("if"), contexts, status):
                result.steps.append(StepResult(step_name(step), None))
                continue
            done = self.run_step(index, step, contexts, state)
            result.steps.append(done)
            if "id" in step:
                state.outputs[str(step["id"])] = done.outputs
            forgiven = substitute(text(step.get("continue-on-error")), contexts) == "true"
            if done.code != 0 and not forgiven:
                result.failed = True
        result.summary = state.summary
        return result

    def run_step(
        self, index: int, step: Mapping[str, Any], contexts: Contexts, state: JobState
    ) -> StepResult:
        """Run one step (a script or a stubbed action) and collect what it left in its files."""
        name = step_name(step)
        if "uses" in step:
            inputs = substitute_all(step.get("with"), contexts)
            outcome = self.action(str(step["uses"]), inputs, state.event, state.workdir)
            return StepResult(name, outcome.code, outcome.output)
        paths = state.step_files(index)
        env = self.step_env(state, substitute_all(step.get("env"), contexts), paths)
        script = paths["script"]
        script.write_text(substitute(str(step["run"]), contexts))
        where = step.get("working-directory", state.defaults.get("working-directory", ""))
        shell = step.get("shell", state.defaults.get("shell"))
        argv = shell_argv(shell, script)
        code, output = run_process(argv, state.workdir / str(where), env, self.step_timeout)
        state.absorb(paths)
        return StepResult(name, code, output, read_pairs(paths["GITHUB_OUTPUT"]))

    def step_env(
        self, state: JobState, step_env: dict[str, str], paths: dict[str, Path]
    ) -> dict[str, str]:
        """The environment of a script step: the host's (less GITHUB_*, VAST_* ...), `host_env`,
        workflow/job env, GITHUB_ENV, step env; then the GITHUB_* a workflow cannot override."""
        host = {k: v for k, v in os.environ.items() if not k.startswith(PRIVATE_PREFIXES)}
        env = {**host, **self.host_env, **state.env, **state.exported, **step_env}
        path = [str(d) for d in (*state.added_path, *self.bin_dirs)]
        env["PATH"] = os.pathsep.join([*path, host.get("PATH", os.defpath)])
        env.setdefault("GITHUB_TOKEN", self.token)
        env |= {k: str(v) for k, v in paths.items() if k.startswith("GITHUB_")}
        env |= {"GITHUB_JOB": state.job_id, "RUNNER_TEMP": str(state.files), "RUNNER_OS": "Linux"}
        env |= {"GITHUB_WORKSPACE": str(state.workdir), "GITHUB_EVENT_PATH": str(state.event_path)}
        return env | self.defaults_env(state.event, state.github)

    def defaults_env(self, event: Event, github: Mapping[str, Any]) -> dict[str, str]:
        """The GITHUB_* variables every hosted step sees, from the event and `github` context."""
        return {
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_SHA": event.sha,
            "GITHUB_REF": event.ref,
            "GITHUB_REF_NAME": str(github["ref_name"]),
            "GITHUB_HEAD_REF": str(github["head_ref"]),
            "GITHUB_BASE_REF": str(github["base_ref"]),
            "GITHUB_EVENT_NAME": event.name,
            "GITHUB_REPOSITORY": self.repository_name,
            "GITHUB_REPOSITORY_OWNER": str(github["repository_owner"]),
            "GITHUB_API_URL": self.api_url,
            "GITHUB_SERVER_URL": self.server_url,
            "GITHUB_RUN_ID": str(github["run_id"]),
            "GITHUB_RUN_NUMBER": str(github["run_number"]),
            "GITHUB_RUN_ATTEMPT": "1",
            "GITHUB_ACTOR": "tester",
        }

    def action(
        self, uses: str, inputs: Mapping[str, str], event: Event, workdir: Path
    ) -> actions.Outcome:
        """A `uses:` step, stubbed; an action with no stand-in raises."""
        name = uses.split("@", maxsplit=1)[0]
        if name == "actions/checkout":
            where = workdir / inputs.get("path", "")
            return self.checkouts.checkout(where, inputs.get("ref") or event.sha)
        if name == "actions/upload-artifact":
            return actions.upload(self.store, inputs["name"], inputs["path"], workdir)
        if name == "actions/download-artifact":
            return actions.download(self.store, inputs["name"], inputs.get("path", ""), workdir)
        raise Unsupported(f"no stand-in for {uses}: skip it with the runner's `skip` predicate")


@dataclass
class JobState:
    """One job's run: where it works, and what passes from step to step (env, GITHUB_ENV and
    GITHUB_PATH additions, step outputs, the summary)."""

    event: Event
    job_id: str
    workdir: Path
    files: Path
    github: Mapping[str, Any]
    env: dict[str, str]
    defaults: Mapping[str, Any]
    exported: dict[str, str] = field(default_factory=dict)
    added_path: list[str] = field(default_factory=list)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    summary: str = ""

    @property
    def event_path(self) -> Path:
        """The webhook payload of the run (written before the first step)."""
        return self.files / "event.json"

    def step_files(self, index: int) -> dict[str, Path]:
        """The script and the command files of step `index`, each new and empty."""
        names = ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY")
        paths = {name: self.files / f"{index}-{name.lower()}" for name in names}
        for path in paths.values():
            path.write_text("")
        return {**paths, "script": self.files / f"{index}-script"}

    def absorb(self, paths: Mapping[str, Path]) -> None:
        """Take in what a step wrote to GITHUB_ENV, GITHUB_PATH and GITHUB_STEP_SUMMARY."""
        self.exported |= read_pairs(paths["GITHUB_ENV"])
        added = paths["GITHUB_PATH"].read_text().splitlines()
        self.added_path[:0] = [line for line in reversed(added) if line.strip()]
        self.summary += paths["GITHUB_STEP_SUMMARY"].read_text()
