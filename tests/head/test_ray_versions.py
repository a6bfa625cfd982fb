"""Ray and Python versions across the cluster: Ray's own rule, the head's enrollment decision, the
protocol's `runtime`, and how the agent finds the Python its Ray runs on.

Ray 2.60 refuses a worker node in `ray._private.node.Node.__init__` (before it starts anything)
with `ray._private.utils.check_version_info`: the Ray version exactly, and the Python version to
the level `RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL` names in the node's environment, `patch` by
default. The table below is held to that very function.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import ray
from ray._private import node as ray_node
from ray._private import utils as ray_utils

from agent import messages as agent_messages
from agent import rayversion
from agent.config import Settings
from reconciler.head import enrollment, messages, tokens
from reconciler.head.messages import EnrollRequest
from reconciler.model import rayversions
from reconciler.model.rayversions import RayVersions
from reconciler.model.records import BreakerState, InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.requestrecord import Request, Slot
from reconciler.state.ledger import LedgerKind

from .harness import LINEAGE, cluster_spec, hc_record

NOW = 1_800_000_000.0
HEAD = RayVersions("2.60.0", "3.11.7")
IMAGE = "rayproject/ray:2.49.0-py310-cu121"
SPEC = cluster_spec()
CPU = SPEC.node_types["cpu"]
PRINT = rayversions.fingerprint(IMAGE, CPU.env)

# (node's Ray, node's Python, its RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL) -> Ray lets it join
RULE = [
    ("2.60.0", "3.11.7", None, True),
    ("2.49.0", "3.10.12", None, False),  # another Ray (and Python)
    ("2.49.0", "3.11.7", None, False),  # another Ray only
    ("2.49.0", "3.11.7", "minor", False),  # the level says nothing about Ray
    ("2.60.0rc0", "3.11.7", None, False),  # a release candidate is another version
    ("2.60.0", "3.11.9", None, False),  # another Python patch: the default level is patch
    ("2.60.0", "3.11.9", "patch", False),
    ("2.60.0", "3.11.9", "minor", True),  # only a warning in Ray's log
    ("2.60.0", "3.10.7", "minor", False),  # another Python minor
    ("2.60.0", "3.12.7", None, False),
    ("2.60.0", "3.11.7", "minor", True),
    ("2.60.0", "3.11.7", "major", False),  # not a level Ray knows: its check raises
]


@pytest.mark.parametrize(("ray", "python", "level", "joins"), RULE)
def test_the_rule_is_rays_own(
    ray: str, python: str, level: str | None, joins: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray's check, with this process playing the joining node
    monkeypatch.setattr(ray_utils, "compute_version_info", lambda: (ray, python))
    if level is None:
        monkeypatch.delenv(rayversions.MATCH_LEVEL_ENV, raising=False)
    else:
        monkeypatch.setenv(rayversions.MATCH_LEVEL_ENV, level)
    metadata = {"ray_version": HEAD.ray, "python_version": HEAD.python}
    try:
        ray_utils.check_version_info(metadata, "node 198.51.100.9")
        ray_joins = True
    except (RuntimeError, ValueError):
        ray_joins = False
    ours = rayversions.refusal(HEAD, RayVersions(ray, python, level))
    assert ray_joins is joins
    assert (ours is None) is joins, ours


def test_a_worker_node_is_checked_at_the_environments_level() -> None:
    """What the rule above assumes: a node's check names no level, so the joining process's
    RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL decides (Ray Client alone says `minor`)."""
    source = inspect.getsource(ray_node.Node.check_version_info)
    assert "check_version_info(" in source and "python_version_match_level" not in source
    assert '"RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch"' in inspect.getsource(
        ray_utils.check_version_info
    )
    init = inspect.getsource(ray_node.Node.__init__)
    assert "if not head and not connect_only:\n            self.check_version_info()" in init


def test_unknown_versions_are_left_to_ray() -> None:
    assert rayversions.refusal(HEAD, RayVersions(None, "3.10.1")) is None
    assert rayversions.refusal(HEAD, RayVersions("2.49.0", None)) is None
    assert rayversions.refusal(RayVersions(None, "3.11.7"), RayVersions("2.49.0", "3.10.1")) is None


# --- the enrollment decision ----------------------------------------------------------------


def candidate(ident: str, request: str = "q1", vast_id: int | None = None, **kw) -> InstanceRecord:
    return hc_record(ident, created_at=NOW - 60, request_id=request, vast_id=vast_id, **kw)


def slot_request(ident: str = "q1", *, slots: int = 1, fingerprint: str | None = PRINT) -> Request:
    return Request(
        id=ident,
        cluster="hc",
        node_type="cpu",
        managed_by=LINEAGE,
        placed_at=NOW - 100,
        provision_deadline=NOW + 1000,
        slots=tuple(Slot(f"{ident}s{i}") for i in range(1, slots + 1)),
        image=IMAGE if fingerprint == PRINT else "rayproject/ray:2.60.0-py311",
        fingerprint=fingerprint,
    )


def world(
    *candidates: InstanceRecord, requests: tuple[Request, ...] = ()
) -> tuple[Records, dict[str, str]]:
    records = Records(
        instances={c.id: c for c in candidates},
        requests={r.id: r for r in requests or (slot_request(),)},
    )
    raw: dict[str, str] = {}
    for c in candidates:
        raw[c.id] = tokens.mint()
        jt = tokens.join_token(raw[c.id], cluster="hc", record_id=c.id, now=NOW - 50, window=600)
        records = tokens.with_token(records, jt)
    return records, raw


def ask(records: Records, token: str, vast_id: int, runtime: RayVersions | None, **kw):
    request = EnrollRequest(
        token, vast_id, "abcd0001", "198.51.100.9", {}, 4, 0, "test", runtime=runtime
    )
    return enrollment.enroll(
        records,
        request,
        cluster="hc",
        lineage=LINEAGE,
        now=NOW,
        serial=7,
        head=kw.get("head", HEAD),
        spec=SPEC,
    )


# what the candidate's image runs -> admitted, or the refusal's message
DECISIONS = [
    (RayVersions("2.60.0", "3.11.7"), None),
    (
        RayVersions("2.49.0", "3.10.12"),
        f"image {IMAGE} has Ray 2.49.0 (Python 3.10.12), the head runs Ray 2.60.0 (Python "
        "3.11.7): Ray refuses a worker node of another Ray version",
    ),
    (
        RayVersions("2.60.0", "3.11.9"),
        f"image {IMAGE} has Ray 2.60.0 (Python 3.11.9), the head runs Ray 2.60.0 (Python "
        "3.11.7): Ray refuses a worker node of another Python version, to the patch level unless "
        "the image's environment sets RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor",
    ),
    (RayVersions("2.60.0", "3.11.9", "minor"), None),
    (
        RayVersions("2.60.0", "3.10.9", "minor"),
        f"image {IMAGE} has Ray 2.60.0 (Python 3.10.9), the head runs Ray 2.60.0 (Python "
        "3.11.7): Ray refuses a worker node of another Python minor version",
    ),
    (RayVersions(None, None), None),  # the agent could not tell: Ray decides
    (RayVersions("2.49.0", None), None),
    (None, None),  # an agent older than the `runtime` field
]


@pytest.mark.parametrize(("runtime", "refused"), DECISIONS)
def test_the_decision(runtime: RayVersions | None, refused: str | None) -> None:
    records, raw = world(candidate("i1", vast_id=11))
    decision = ask(records, raw["i1"], 11, runtime)
    if refused is None:
        assert decision.refusal is None and decision.outcome is not None
        assert decision.records.instances["i1"].role is Role.WORKER
        assert decision.records.breakers["hc/cpu"].halt is None
        (note,) = decision.notes
        assert note.cls == "enrolled"
        if runtime is not None:
            assert note.data["ray_version"] == runtime.ray
        return
    assert decision.refusal is not None
    assert (decision.refusal.status, decision.refusal.error) == (403, "ray_version_mismatch")
    assert decision.refusal.message == refused
    assert decision.outcome is None
    halt = decision.records.breakers["hc/cpu"].halt
    assert halt is not None and (halt.reason, halt.image, halt.fingerprint, halt.record) == (
        refused,
        IMAGE,
        PRINT,
        "i1",
    )
    assert decision.records.instances["i1"] == records.instances["i1"]  # it ends itself
    assert next(iter(decision.records.tokens.values())).used_at is None


def test_no_head_versions_no_check() -> None:
    records, raw = world(candidate("i1", vast_id=11))
    decision = ask(records, raw["i1"], 11, RayVersions("2.49.0", "3.10.12"), head=None)
    assert decision.refusal is None


def test_the_first_refusal_halts_the_node_type_and_ends_its_other_candidates_of_that_image() -> (
    None
):
    worker = candidate("w1", request="q0", vast_id=10, role=Role.WORKER, phase=Phase.SERVING)
    records, raw = world(
        candidate("i1", vast_id=11),
        candidate("i2", vast_id=12),
        candidate("i3"),  # its create is still under way
        candidate("i4", request="q2", vast_id=14),  # rented for the image the spec names now
        candidate("i5", request="q3", vast_id=15),  # of a request placed before fingerprints
        worker,
        requests=(
            slot_request(slots=2),
            slot_request("q2", fingerprint="another-image"),
            slot_request("q3", fingerprint=None),
        ),
    )
    records = replace(records, breakers={"hc/cpu": BreakerState(consecutive_empty=1)})
    decision = ask(records, raw["i1"], 11, RayVersions("2.49.0", "3.10.12"))
    assert decision.refusal is not None and decision.refusal.error == "ray_version_mismatch"
    assert {(a.record, a.vast_id, a.reason) for a in decision.destroys} == {
        ("i2", 12, "ray_version_mismatch"),
        ("i3", None, "ray_version_mismatch"),
        ("i5", 15, "ray_version_mismatch"),
    }
    assert all("node type cpu is halted: image" in a.detail for a in decision.destroys)
    for ended in ("i2", "i3", "i5"):
        rec = decision.records.instances[ended]
        assert (rec.intent, rec.phase, rec.ended_reason) == (
            Intent.DESTROYED,
            Phase.DESTROYING,
            "ray_version_mismatch",
        )
    for kept in ("i1", "i4", "w1"):
        assert decision.records.instances[kept] == records.instances[kept]
    state = decision.records.breakers["hc/cpu"]
    assert state.consecutive_empty == 1 and state.halt is not None  # the count is untouched
    (note,) = decision.notes
    assert (note.kind, note.cls, note.record, note.instance) == (
        LedgerKind.DETECTION,
        "ray_version_mismatch",
        "i1",
        11,
    )
    assert "Node type cpu is halted: no rental until its image or env changes" in note.message
    assert note.data["image"] == IMAGE and note.data["head_ray_version"] == "2.60.0"
    assert note.data["destroyed"] == ["i2", "i3", "i5"]

    # asked again while halted: refused the same way, noted, nothing else changes
    again = ask(decision.records, raw["i1"], 11, RayVersions("2.49.0", "3.10.12"))
    assert again.refusal is not None and again.refusal.error == "ray_version_mismatch"
    assert again.records is decision.records and again.destroys == ()
    (note,) = again.notes
    assert note.kind is LedgerKind.NOTE and "halted already" in note.message


def test_a_late_refusal_of_an_earlier_image_halts_that_image_only() -> None:
    """A candidate rented before the spec changed its image is refused for what it runs; the halt
    is bound to its request's image, so the planner lifts it at once for the new one."""
    records, raw = world(
        candidate("i1", vast_id=11), requests=(slot_request(fingerprint="before-the-change"),)
    )
    decision = ask(records, raw["i1"], 11, RayVersions("2.49.0", "3.10.12"))
    halt = decision.records.breakers["hc/cpu"].halt
    assert halt is not None and halt.fingerprint == "before-the-change"
    assert not decision.records.breakers["hc/cpu"].halted(PRINT)


# --- the protocol ----------------------------------------------------------------------------

SETTINGS = Settings(
    instance_id=11,
    instance_key="k" * 20,
    join_token="t" * 32,
    head_address="203.0.113.7",
    enroll_port=18443,
    ca_pem="pem",
    vast_url="https://console.vast.ai",
    public_ip="198.51.100.9",
)


def enroll_doc(runtime: dict[str, object] | None) -> bytes:
    body = agent_messages.enroll_body(
        SETTINGS, boot_id="abcd0001", cpus=4, cpu_source="test", gpus=0, runtime=runtime
    )
    return json.dumps(body).encode()


def test_what_the_agent_sends_is_what_the_head_reads() -> None:
    found = rayversion.probe(("ray",), {"PATH": str(Path(sys.executable).parent)})
    doc = messages.parse(messages.ENROLL_REQUEST, enroll_doc(found))
    request = EnrollRequest.of(doc)
    assert request.runtime == RayVersions(
        ray.__version__, "{}.{}.{}".format(*sys.version_info[:3]), None
    )
    assert request.runtime_source.startswith(found["python"])
    without = EnrollRequest.of(messages.parse(messages.ENROLL_REQUEST, enroll_doc(None)))
    assert without.runtime is None


@pytest.mark.parametrize(
    "runtime",
    [
        {"ray_version": "2.60.0"},  # python_version missing
        {"ray_version": "2.60.0", "python_version": "3.11"},  # not major.minor.patch
        {"ray_version": "", "python_version": "3.11.7"},
        {"ray_version": "2.60.0", "python_version": "3.11.7", "extra": 1},
        {"ray_version": "2.60.0", "python_version": "3.11.7", "python_version_match_level": 3},
    ],
)
def test_a_malformed_runtime_is_refused(runtime: dict[str, object]) -> None:
    with pytest.raises(messages.BadMessage):
        messages.parse(messages.ENROLL_REQUEST, enroll_doc(runtime))


def test_the_refusal_is_a_protocol_error() -> None:
    doc = {"error": "ray_version_mismatch", "message": "image x has Ray 2.49.0 ..."}
    messages.validator(messages.ERROR).validate(doc)


# --- which Python the agent asks -------------------------------------------------------------

SHEBANGS = [
    (["#!/opt/conda/bin/python3.10"], "/opt/conda/bin/python3.10"),
    (["#!/usr/bin/env python3"], "python3"),
    (["#!/usr/bin/env -S python3 -u"], "python3"),
    (["#!/bin/sh", '\'\'\'exec\' "/long path/bin/python" "$0" "$@"'], "/long path/bin/python"),
    (["#!/bin/sh", "'''exec' /opt/py/bin/python3.12 \"$0\" \"$@\""], "/opt/py/bin/python3.12"),
    (["#!/bin/bash", 'exec ray-real "$@"'], None),  # a wrapper that names no Python
    (["#!/usr/bin/perl"], None),
    (["\x7fELF"], None),  # a binary
    ([], None),
]


@pytest.mark.parametrize(("lines", "python"), SHEBANGS)
def test_the_interpreter_a_script_names(lines: list[str], python: str | None) -> None:
    assert rayversion.shebang(lines) == python


def test_the_agent_asks_the_python_of_the_ray_on_path(tmp_path: Path) -> None:
    ray = tmp_path / "ray"
    ray.write_text(f"#!{sys.executable}\nprint('not run')\n")
    ray.chmod(0o755)
    env = {"PATH": str(tmp_path), rayversion.MATCH_LEVEL_ENV: "minor", "RV_JOIN_TOKEN": "s"}
    found = rayversion.probe(("ray",), env)
    assert found["python"] == sys.executable
    assert found["python_version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert found["ray_version"] is not None and found["python_version_match_level"] == "minor"
    assert "Ray's package metadata" in found["source"]


def test_a_python_ray_command_is_asked_itself() -> None:
    found = rayversion.probe((sys.executable, "fake_ray.py"), {"PATH": os.defpath})
    assert found["python"] == sys.executable and found["python_version"] is not None


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (("/nonexistent/ray",), "/nonexistent/ray is not on PATH"),
        (("python9.9",), "python9.9 is not on PATH"),
        ((), "no Ray command"),
    ],
)
def test_what_cannot_be_told_is_said(command: tuple[str, ...], why: str) -> None:
    found = rayversion.probe(command, {"PATH": "/nonexistent"})
    assert found == {"ray_version": None, "python_version": None, "source": why}


def test_a_python_without_ray(tmp_path: Path) -> None:
    """A `ray` whose Python has no Ray (site-packages hidden): the Python answers, Ray is None."""
    ray = tmp_path / "ray"
    ray.write_text("#!/usr/bin/env python3\n")
    shim = tmp_path / "python3"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    for made in (ray, shim):
        made.chmod(0o755)
    found = rayversion.probe(("ray",), {"PATH": str(tmp_path)})
    assert found["python"] == str(shim)
    assert found["python_version"] is not None and found["ray_version"] is None
    assert "no Ray package" in found["source"]
