"""`validate` and `plan` warn when a node type's image tag names another Ray version or Python
than the head's: Ray would refuse its workers, so its candidates would be refused at enrollment
and the node type halted. Tags that name no version (and images that are not Ray's) say nothing,
and nothing is warned."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler import cli, rayruntime
from reconciler.cli import context
from reconciler.model.diagnostics import Diagnostics
from reconciler.model.rayversions import RayVersions, TagVersions, from_image
from reconciler.spec import checks
from reconciler.spec.loader import load_texts
from reconciler.spec.yamlread import read_documents
from tests.scenarios.world import cluster_text

HEAD = RayVersions("2.60.0", "3.11.7")

TAGS = [
    ("rayproject/ray:2.49.0-py310-cu121", TagVersions("2.49.0", "3.10")),
    ("rayproject/ray:2.60.0-py311-cpu", TagVersions("2.60.0", "3.11")),
    ("rayproject/ray:2.60.0", TagVersions("2.60.0", None)),
    ("rayproject/ray:2.60.0-gpu", TagVersions("2.60.0", None)),
    ("rayproject/ray-ml:2.9.3-py39-gpu", TagVersions("2.9.3", "3.9")),
    ("rayproject/ray-llm:2.44.1-py311-cu124", TagVersions("2.44.1", "3.11")),
    ("rayproject/ray:2.49.0.a1b2c3-py312-aarch64", TagVersions("2.49.0", "3.12")),
    ("docker.io/rayproject/ray:2.49.0-py310", TagVersions("2.49.0", "3.10")),
    ("localhost:5000/rayproject/ray:2.49.0-py313", TagVersions("2.49.0", "3.13")),
    ("rayproject/ray:2.49.0-py310@sha256:" + "a" * 64, TagVersions("2.49.0", "3.10")),
    ("anyscale/ray:2.49.0-slim-py312-cu128", TagVersions("2.49.0", "3.12")),
    ("rayproject/ray:latest", None),
    ("rayproject/ray:nightly-py311", None),
    ("rayproject/ray", None),  # no tag
    ("rayproject/ray@sha256:" + "b" * 64, None),
    ("myorg/ray:2.1.0", None),  # not Ray's image: its tag is the user's own
    ("pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", None),
    ("vastsim/agent-test:latest", None),
    ("img", None),
]


@pytest.mark.parametrize(("image", "named"), TAGS)
def test_what_a_tag_names(image: str, named: TagVersions | None) -> None:
    assert from_image(image) == named


def warnings_for(image: str, head: RayVersions = HEAD) -> list[str]:
    text = cluster_text("c", image=image)
    (spec,) = load_texts([("c.yaml", text)]).clusters
    (document,) = read_documents(text, "c.yaml", Diagnostics())
    diags = Diagnostics()
    checks.image_warnings(spec, document.positions, diags, head=head)
    return [f"{d.location.line if d.location else '?'}: {d.summary} / {d.detail}" for d in diags]


WARNINGS = [
    ("rayproject/ray:2.60.0-py311-cpu", []),
    ("rayproject/ray:2.60.0", []),
    ("rayproject/ray:latest", []),
    ("myorg/train:2.49.0-py310", []),
    (
        "rayproject/ray:2.49.0-py310-cu121",
        [
            "11: image rayproject/ray:2.49.0-py310-cu121 names Ray 2.49.0 and Python 3.10; the "
            "head runs Ray 2.60.0 (Python 3.11.7) / Ray refuses a worker node of another Ray or "
            "Python version: its candidates would be refused when they enroll and node type "
            "'gpu' halted; use an image of Ray 2.60.0 on Python 3.11"
        ],
    ),
    ("rayproject/ray:2.49.0", ["11: image rayproject/ray:2.49.0 names Ray 2.49.0; the head"]),
    ("rayproject/ray:2.60.0-py312", ["11: image rayproject/ray:2.60.0-py312 names Python 3.12;"]),
]


@pytest.mark.parametrize(("image", "said"), WARNINGS)
def test_the_warning(image: str, said: list[str]) -> None:
    got = warnings_for(image)
    assert len(got) == len(said), got
    for line, want in zip(got, said, strict=True):
        assert line.startswith(want), line


def test_a_head_without_ray_compares_python_only() -> None:
    assert warnings_for("rayproject/ray:2.49.0-py311", RayVersions(None, "3.11.7")) == []


def spec_dir(tmp_path: Path, image: str) -> Path:
    (tmp_path / "c.yaml").write_text(cluster_text("c", image=image))
    return tmp_path


def test_validate_warns_against_this_heads_versions(tmp_path: Path) -> None:
    head = rayruntime.local()
    assert head.ray is not None and head.python is not None
    other = "2.49.0" if head.ray != "2.49.0" else "2.48.0"
    minor = "".join(head.python.split(".")[:2])
    outcome = CliRunner().invoke(
        cli.app, ["validate", str(spec_dir(tmp_path, f"rayproject/ray:{other}-py{minor}"))]
    )
    assert outcome.exit_code == 0, outcome.output
    assert f"warning: image rayproject/ray:{other}-py{minor} names Ray {other}; the head " in (
        outcome.output
    )
    assert outcome.output.count(" names Ray ") == 1
    same = f"rayproject/ray:{head.ray}-py{minor}-cpu"
    quiet = CliRunner().invoke(cli.app, ["validate", str(spec_dir(tmp_path, same))])
    assert quiet.exit_code == 0 and " names " not in quiet.output


def test_plan_says_the_warnings_of_specs_that_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan` (and `apply` of a directory) load their specs with `context.specs(warn=True)`."""
    specs = context.specs(spec_dir(tmp_path, "rayproject/ray:2.0.0-py38"), warn=True)
    assert [s.name for s in specs] == ["c"]
    err = capsys.readouterr().err
    assert "c.yaml:11:" in err and "warning: image rayproject/ray:2.0.0-py38 names Ray 2.0.0" in err
    context.specs(spec_dir(tmp_path, "rayproject/ray:2.0.0-py38"))
    assert capsys.readouterr().err == ""
