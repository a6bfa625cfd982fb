"""The $/h budget as a bound inside Ray's packing (issue 24), the way Ray bounds a node type.

Ray's scheduler launches its best-scoring node, then the next, and a node type with no room left
under its `max_workers` leaves the pool while the others go on. A budget is the same kind of
bound: once the money left cannot buy a node type's next node, that node type leaves the pool
where Ray's own order reaches it. Ray's loop takes no such bound, so it is found from outside
with Ray's node cap, which stops the same loop after its n-th node (`raypacking._schedule`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reconciler.model.demand import CurrentNode

# One run of Ray's scheduler: a node cap and per-type bounds in, its reply and launches out.
Run = Callable[[int | None, Mapping[str, int]], tuple[Any, Mapping[str, int]]]


def within(  # noqa: PLR0917 - Ray's run and the bounds it is searched within
    run: Run,
    cap: int | None,
    nodes: Sequence[CurrentNode],
    floor: int,
    prices: Mapping[str, float],
    allowance: float,
) -> tuple[Any, Mapping[str, int]]:
    """Ray's packing with every node type that the money left cannot buy the next node of taken
    out of the pool where Ray's order reaches it. `floor` is the node cap below which Ray
    would cut `min_workers` (the nodes there and those min_workers adds: Ray launches those
    first and assumes its cap holds them).

    A run capped at n nodes is Ray's own loop stopped after its n-th node, so the last n whose
    launches fit the allowance is found by halving; the node Ray would launch next names the
    node type(s) that leave the pool (bounded at what they have then), and the search goes on
    with the others. Each round takes a node type out, so there are at most as many rounds as
    node types."""
    held: dict[str, int] = {}
    while True:
        reply, launches = run(cap, held)
        if cost(launches, prices) <= allowance + 1e-9:
            return reply, launches
        best = run(floor, held)  # Ray's min_workers launches come before any cap
        lo, hi = floor + 1, len(nodes) + sum(launches.values()) - 1
        if cap is not None:
            hi = min(hi, cap)
        while lo <= hi:
            mid = (lo + hi) // 2
            tried = run(mid, held)
            if cost(tried[1], prices) <= allowance + 1e-9:
                best, lo = tried, mid + 1
            else:
                hi = mid - 1
        after = run(len(nodes) + sum(best[1].values()) + 1, held)[1]
        grown = [t for t, n in after.items() if n > best[1].get(t, 0) and t not in held]
        if not grown:  # the next node costs nothing more: no node type to take out
            return best
        for name in grown:
            held[name] = sum(1 for n in nodes if n.node_type == name) + best[1].get(name, 0)


def cost(launches: Mapping[str, int], prices: Mapping[str, float] | None) -> float:
    """The $/h of the launches, a node of each type at its price (unpriced: nothing)."""
    return sum(count * (prices or {}).get(name, 0.0) for name, count in launches.items())
