"""Rents go out round by round (issue 25): every open slot's first candidate before any slot's
second, across the requests of a plan. vast sends one create every 4.5 s, so with
`candidate_factor: 2` a request's second candidates, sent first, kept the next request's slots
waiting for their first a whole request's creates."""

from __future__ import annotations

import textwrap

from reconciler.model.demand import scripted
from reconciler.model.observation import Observation
from reconciler.model.plan import ActionKind
from reconciler.model.records import Records
from reconciler.spec.text import spec_yaml
from tests.planning.builders import LINEAGE, NOW, offer
from tests.planning.planned import plan
from tests.specs import load_spec

TWO_TYPES = spec_yaml(
    "two",
    textwrap.dedent(
        """\
        max_dollars_per_hour: 100
        breaker: {slots: 10}
        node_types:
          a:
            min_workers: 3
            max_workers: 3
            candidate_factor: 2
            image: img
            disk_gb: 10
          b:
            min_workers: 3
            max_workers: 3
            candidate_factor: 2
            image: img
            disk_gb: 10
        """
    ),
)


def test_each_slot_s_first_candidate_goes_out_before_any_slot_s_second() -> None:
    spec = load_spec(TWO_TYPES)
    offers = {
        ("two", "a"): tuple(offer(i, 0.2 + i / 100) for i in range(1, 10)),
        ("two", "b"): tuple(offer(i, 0.2 + i / 100) for i in range(11, 20)),
    }
    observation = Observation(listing=(), offers=offers, ray=scripted({"two": spec}, {}))
    made = plan([spec], observation, Records(), lineage=LINEAGE, serial=1, now=NOW)
    order = [a.node_type for a in made.actions if a.kind is ActionKind.RENT]
    assert order == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
