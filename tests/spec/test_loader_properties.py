"""Whatever the input, loading yields a valid model or diagnostics, never another exception."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.model.spec import ClusterSpec
from reconciler.spec.loader import LoadResult, load_texts

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "clusters").glob("*.yaml"))
EXAMPLE_TEXTS = [p.read_text() for p in EXAMPLES]
EXAMPLE_DOCS = [yaml.safe_load(t) for t in EXAMPLE_TEXTS]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


def check(result: LoadResult) -> None:
    """Either clusters and no error, or errors (each with a message) and no cluster."""
    assert isinstance(result, LoadResult)
    assert result.ok == (not result.diagnostics.has_errors())
    if not result.ok:
        assert result.clusters == ()
    assert all(d.summary for d in result.diagnostics)
    assert all(isinstance(c, ClusterSpec) for c in result.clusters)


def paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths_of(v, (*prefix, i))
    return out


def mutate(doc: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    if not path:
        return value if action == "replace" else doc
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "delete" and isinstance(parent, dict):
        del parent[last]
    elif action == "insert" and isinstance(parent, dict):
        parent[str(value)[:12] or "x"] = value
    else:
        parent[last] = value
    return doc


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    check(load_texts([("fuzz.yaml", text)]))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_arbitrary_yaml_documents(value: Any) -> None:
    text = yaml.safe_dump(value, allow_unicode=True)
    check(load_texts([("fuzz.yaml", text)]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=len(EXAMPLE_DOCS) - 1),
    st.data(),
    st.sampled_from(["replace", "delete", "insert"]),
    json_values,
)
def test_mutated_examples(index: int, data: st.DataObject, action: str, value: Any) -> None:
    doc = EXAMPLE_DOCS[index]
    path = data.draw(st.sampled_from(paths_of(doc)))
    text = yaml.safe_dump(mutate(doc, path, action, value), allow_unicode=True)
    check(load_texts([("mutant.yaml", text)]))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=0, max_value=len(EXAMPLE_TEXTS) - 1),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=40),
    st.text(max_size=8),
)
def test_spliced_example_text(index: int, at: int, cut: int, insert: str) -> None:
    text = EXAMPLE_TEXTS[index]
    at %= len(text)
    check(load_texts([("spliced.yaml", text[:at] + insert + text[at + cut :])]))
