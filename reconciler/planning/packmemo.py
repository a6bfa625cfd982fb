"""Ray's scheduler asked the same question once (issue 24).

The planner packs each cluster's Ray report every plan (twice a reconcile: unpriced, then with
the offers), and the wake-up check between reconciles packs it every few seconds; between two
of them the report and the cluster rarely change, and Ray's scheduler is the costly part of a
plan. A question is equal to another by what it asks, its inputs written out in full, so a
remembered answer is exactly the answer Ray would give again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.model.demand import CurrentNode, Demand, Packing, TypeShape


@dataclass(frozen=True, eq=False)
class Question:
    """One question to Ray's scheduler, equal to another by what it asks (`key`, the inputs
    written out): the planner and the wake-up check between reconciles ask the same question
    tick after tick, and Ray's scheduler is the costly part of a plan."""

    key: str
    node_types: Sequence[TypeShape]
    nodes: Sequence[CurrentNode]
    demand: Demand
    max_workers: int | None
    prices: Mapping[str, float] | None
    allowance: float | None
    cheapest: Mapping[str, float] | None = None  # `scheduling: cheapest`: by these prices

    @classmethod
    def of(  # noqa: PLR0917 - pack's own arguments
        cls,
        node_types: Sequence[TypeShape],
        nodes: Sequence[CurrentNode],
        demand: Demand,
        max_workers: int | None,
        prices: Mapping[str, float] | None,
        allowance: float | None,
        cheapest: Mapping[str, float] | None = None,
    ) -> Question:
        def written(p: Mapping[str, float] | None) -> object:
            return None if p is None else sorted(p.items())

        key = repr(
            (
                tuple(node_types),
                tuple(nodes),
                demand,
                max_workers,
                written(prices),
                allowance,
                written(cheapest),
            )
        )
        return cls(
            key, tuple(node_types), tuple(nodes), demand, max_workers, prices, allowance, cheapest
        )

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Question) and other.key == self.key


@functools.lru_cache(maxsize=1024)
def answer(question: Question, decide: Callable[[Question], Packing]) -> Packing:
    """`decide(question)`, remembered for the next time the same question is asked."""
    return decide(question)
