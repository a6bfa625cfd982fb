"""`redact`: every occurrence of every secret, anywhere in a JSON-like value, becomes `***`."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.state import MASK, redact

KEY = "vk_3f9a1c7e5b2d4068"


def test_a_secret_inside_text_is_masked_everywhere_it_occurs() -> None:
    assert redact(f"a {KEY} b {KEY}", [KEY]) == f"a {MASK} b {MASK}"


def test_keys_values_and_nested_sequences_are_walked() -> None:
    value = {"headers": {"Authorization": f"Bearer {KEY}"}, KEY: [KEY, (f"x{KEY}", 3)], "n": 1}
    assert redact(value, [KEY]) == {
        "headers": {"Authorization": f"Bearer {MASK}"},
        MASK: [MASK, (f"x{MASK}", 3)],
        "n": 1,
    }


def test_the_input_is_not_changed() -> None:
    value = {"k": [KEY]}
    redact(value, [KEY])
    assert value == {"k": [KEY]}


def test_a_longer_secret_that_contains_a_shorter_one_is_masked_whole() -> None:
    assert redact(f"{KEY}-extra", [KEY, f"{KEY}-extra"]) == MASK


def test_empty_secrets_and_non_strings_are_left_alone() -> None:
    assert redact({"a": 1, "b": None, "c": True, "d": 2.5}, ["", KEY]) == {
        "a": 1,
        "b": None,
        "c": True,
        "d": 2.5,
    }
    assert redact("unchanged", []) == "unchanged"


json_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=30)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
secrets = st.from_regex(r"vk_[A-Za-z0-9]{8,24}", fullmatch=True)


@st.composite
def values_with_secrets(draw: st.DrawFn) -> tuple[Any, str]:
    """A JSON value with the secret spliced into some of its strings and keys."""
    secret = draw(secrets)

    def splice(value: Any) -> Any:
        if isinstance(value, str):
            return draw(st.sampled_from([value, value + secret, secret + value]))
        if isinstance(value, list):
            return [splice(v) for v in value]
        if isinstance(value, dict):
            return {splice(k): splice(v) for k, v in value.items()}
        return value

    return splice(draw(json_values)), secret


@settings(max_examples=150, deadline=None)
@given(values_with_secrets())
def test_no_secret_survives_in_the_json_of_a_redacted_value(case: tuple[Any, str]) -> None:
    value, secret = case
    assert secret not in json.dumps(redact(value, [secret]), ensure_ascii=False)
