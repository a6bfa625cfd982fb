"""The compiled fast check never accepts what the reference validator refuses.

`messages.parse` answers from `fastcheck` when a message passes it and asks `jsonschema` only
when it does not. So every body, hostile or not, must get the same verdict from both: valid
messages of each kind, mutated at any leaf into the values a stranger would try (booleans where
numbers go, integral floats where integers go, numbers past 64 bits, wrong types, unknown keys,
missing keys).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.head import fastcheck, messages

HEARTBEAT = {
    "protocol": 1,
    "instance_id": 20000009,
    "record_id": "i14",
    "boot_id": "01312d090001",
    "seq": 115,
    "sent_at": 1790003591.0,
    "ray": {"state": "running", "pid": 4242, "exit_code": None, "uptime_seconds": 3420.0},
    "processes": {"pids": 120, "pids_limit": None, "ray_processes": 8},
    "worker_ports": {"in_use": [10002, 10003], "total": 16},
    "utilisation": {
        "sample_seconds": 30.0,
        "cpu_fraction": 0.01,
        "load1": 0.0,
        "memory_used_fraction": 0.4,
        "net_rx_bytes": 0,
        "net_tx_bytes": 0,
        "gpu_fraction": 0.0,
        "cpu_source": "cgroup",
        "gpu_memory_fraction": 0.4,
        "gpu_memory_activity": 0.0,
        "gpu_source": "nvml",
    },
    "stop": "acknowledged",
}
MACHINE = {"cpus": 8, "cpu_source": "cgroup", "gpus": 1}
RUNTIME = {"ray_version": "2.60.0", "python_version": "3.11.7"}
ENROLL = {
    "protocol": 1,
    "token": "t" * 43,
    "instance_id": 20000009,
    "boot_id": "01312d090001",
    "public_ip": "198.51.100.7",
    "ports": {"8470": 40001, "10001": 40002},
    "machine": MACHINE,
    "runtime": RUNTIME,
}
RESUME = {k: v for k, v in ENROLL.items() if k != "token"} | {"record_id": "i14"}
REPORT = {
    "protocol": 1,
    "token": "t" * 43,
    "instance_id": 20000009,
    "boot_id": "01312d090001",
    "record_id": "i14",
    "phase": "worker",
    "reason": "ray_exited",
    "detail": "raylet exited with 1",
    "at": 1790003591.5,
}
SAMPLES = {
    messages.HEARTBEAT: HEARTBEAT,
    messages.ENROLL_REQUEST: ENROLL,
    messages.RESUME: RESUME,
    messages.REPORT: REPORT,
}
HOSTILE: list[Any] = [
    True,
    False,
    None,
    0,
    1,
    -1,
    1.0,
    1234.0,
    0.5,
    -0.0,
    1e300,
    2**63,
    -(2**63),
    2**64 + 1,
    "",
    "x" * 300,
    "01312d090001",
    "running",
    "acknowledged",
    "\udc80",
    [],
    [1, 1],
    [True, 1],
    {},
    {"": 1},
]


def _reference_accepts(name: str, body: bytes) -> bool:
    try:
        doc = messages._clean(json.loads(body))
    except ValueError:
        return False
    return not any(True for _ in messages.validator(name).iter_errors(doc))


def _fast_accepts(name: str, body: bytes) -> bool:
    raw = json.loads(body, parse_float=fastcheck.Real)
    return fastcheck.passes(messages._fast(name), raw)


def _parses(name: str, body: bytes) -> bool:
    try:
        messages.parse(name, body)
    except messages.BadMessage:
        return False
    return True


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def _mutated(doc: Any, path: tuple[Any, ...], how: str, value: Any) -> Any:
    out = copy.deepcopy(doc)
    if not path:
        return value if how == "set" else out
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if how == "set":
        parent[last] = value
    elif how == "drop" and isinstance(parent, dict):
        del parent[last]
    elif how == "add" and isinstance(parent, dict):
        parent[f"{last}_unknown"] = value
    return out


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_is_valid_to_both(name: str):
    body = json.dumps(SAMPLES[name]).encode()
    assert _reference_accepts(name, body)
    assert _fast_accepts(name, body)


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(SAMPLES)))
    doc = SAMPLES[name]
    edits = draw(st.integers(1, 2))
    for _ in range(edits):
        path = draw(st.sampled_from(_paths(doc)))
        how = draw(st.sampled_from(["set", "set", "set", "drop", "add"]))
        doc = _mutated(doc, path, how, draw(st.sampled_from(HOSTILE)))
    return name, json.dumps(doc).encode("utf-8", "surrogatepass")


@settings(max_examples=600, deadline=None)
@given(mutations())
def test_the_fast_check_gives_the_reference_s_verdict_on_hostile_mutations(case: tuple[str, bytes]):
    name, body = case
    reference = _reference_accepts(name, body)
    assert _parses(name, body) == reference, body
    if not reference:  # the fast check may refuse what only the cleaning refuses, never more
        return
    assert _fast_accepts(name, body), body
    assert messages.parse(name, body) == messages._clean(json.loads(body))


@pytest.mark.parametrize(
    ("field", "value"),
    [("seq", 115.0), ("protocol", True), ("instance_id", 2.0e7), ("seq", True)],
)
def test_what_fastjsonschema_alone_would_take_is_refused(field: str, value: Any):
    """Integers are ints, not integral floats (fastjsonschema alone takes 115.0), nor booleans."""
    body = json.dumps(HEARTBEAT | {field: value}).encode()
    assert not _fast_accepts(messages.HEARTBEAT, body)
    with pytest.raises(messages.BadMessage, match=field):
        messages.parse(messages.HEARTBEAT, body)


def test_a_valid_message_parses_to_plain_floats():
    doc = messages.parse(messages.HEARTBEAT, json.dumps(HEARTBEAT).encode())
    assert type(doc["sent_at"]) is float
    assert type(doc["utilisation"]["cpu_fraction"]) is float


ENCODINGS = ["utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]


@settings(max_examples=400, deadline=None)
@given(
    text=st.lists(
        st.one_of(
            st.characters(exclude_categories=()),
            st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        ),
        max_size=8,
    ).map("".join),
    escaped=st.booleans(),
    encoding=st.sampled_from(ENCODINGS),
)
def test_skipping_the_surrogate_check_never_lets_a_lone_surrogate_through(
    text: str, escaped: bool, encoding: str
):
    """`parse` checks strings for lone surrogates only when the body could hold one; whatever
    the body's encoding (JSON may come as UTF-16 or UTF-32) and however the surrogate is
    written (a `\\u` escape, or raw), it cleans exactly as the full check does."""
    doc = {"why": text, "k": [text, {text: 1.5}]}
    body = json.dumps(doc, ensure_ascii=escaped).encode(encoding, "surrogatepass")
    try:
        parsed = json.loads(body)
    except (UnicodeError, ValueError):
        return
    cleaned = messages._clean(parsed, messages._may_hold_surrogates(body))
    assert cleaned == messages._clean(parsed, True)
    assert json.dumps(cleaned, ensure_ascii=False).encode("utf-8")  # no lone surrogate left
