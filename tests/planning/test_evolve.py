"""`evolve` builds exactly what `dataclasses.replace` builds, and refuses what it refuses."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.model.evolve import evolve
from reconciler.model.records import InstanceRecord, Phase, Records
from tests.planning.builders import record, records

FIELDS = {f.name: f for f in dataclasses.fields(InstanceRecord)}
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "phase": st.sampled_from(list(Phase)),
    "pinned": st.booleans(),
    "lost": st.booleans(),
    "call_attempts": st.integers(0, 9),
    "public_ip": st.none() | st.just("203.0.113.7"),
    "self_report_at": st.none() | st.floats(0, 2e9),
    "dph_total": st.floats(0, 10),
    "ended_reason": st.none() | st.text(max_size=5),
}


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional=VALUES))
def test_evolve_is_replace_on_the_records(changes: dict[str, Any]):
    base = record("i1", phase=Phase.SERVING)
    evolved = evolve(base, **changes)
    assert evolved == dataclasses.replace(base, **changes)
    assert type(evolved) is InstanceRecord
    assert vars(evolved).keys() == FIELDS.keys()  # nothing but the fields
    assert evolved is not base
    assert base == record("i1", phase=Phase.SERVING)  # the original is untouched


def test_an_unknown_field_is_refused_as_replace_refuses_it():
    with pytest.raises(TypeError, match="no_such"):
        evolve(record("i1"), no_such=1)
    with pytest.raises(TypeError):
        dataclasses.replace(record("i1"), no_such=1)  # type: ignore[call-arg]


def test_the_top_level_records_evolve_too():
    rec, before = record("i1"), records()
    evolved = evolve(before, instances={"i1": rec})
    assert evolved == dataclasses.replace(before, instances={"i1": rec})
    assert isinstance(evolved, Records)


@dataclasses.dataclass(frozen=True)
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@dataclasses.dataclass(frozen=True)
class Cached:
    n: int

    @functools.cached_property
    def double(self) -> int:
        return 2 * self.n


def test_a_class_the_copy_would_not_describe_goes_through_replace():
    """A `__post_init__` check still runs; a cached value is never carried over stale."""
    with pytest.raises(ValueError, match="negative"):
        evolve(Checked(1), n=-1)
    one = Cached(1)
    assert one.double == 2
    assert evolve(one, n=5).double == 10
