"""`scheduling: cheapest`: Ray's packing, with the new node picked by its price (issue 25).

Ray's autoscaler picks the node to launch by utilisation (`SchedulingNode._compute_score`) and
never by price; choosing the cheapest resources that fit is SkyPilot's optimizer, which no Ray
autoscaler does. A cluster that asks for it keeps every other rule of Ray's packing (existing
and launching nodes first, min_workers, the request_resources constraint, placement groups
whole, the caps and the budget): only the one decision Ray makes by its score among the *new*
nodes that could take the next demand is made by price instead. The node launched is the one
whose cheapest acceptable live offer costs least per request it serves (a 4-GPU node at $2/h
for 4 one-GPU tasks, $0.50 each, against a 1-GPU node at $0.70/h); a label selector's
preference still comes first, node types of equal price go as Ray's score orders them, and a
node type with no acceptable offer comes after every priced one.

Ray's loop has no hook for this: its choice is the static `_sched_best_node`, called by name.
So the two static methods are wrapped once, and the wrappers do exactly Ray's work unless a
pricing is set for the calling context (`priced`): a cluster with `scheduling: ray`, and every
other caller of Ray's scheduler, get Ray's own code path. The wrapped `_try_schedule` marks the
nodes the context already holds (running, pending, or decided earlier in this run), so the
choice among new nodes is told from the choice among existing ones, which stays Ray's.

Ray's scheduler is handed in (`raypacking._Ray.scheduler`): this module imports no Ray.
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reconciler.model.demand import Choice

# Set on the nodes a scheduling context holds when `_try_schedule` starts (see the docstring).
_EXISTING = "_rv_existing"
# Set on the wrappers this module installs.
_OURS = "_rv_cheapest"
# Prices closer than this are equal, and Ray's own order decides between them.
_SAME_PRICE = 1e-9


@dataclass
class _Pricing:
    prices: Mapping[str, float]  # $/h of each node type's cheapest acceptable offer
    choices: list[Choice] = field(default_factory=list)


_current: contextvars.ContextVar[_Pricing | None] = contextvars.ContextVar(
    "ray_vast_cheapest", default=None
)


@contextmanager
def priced(scheduler: Any, prices: Mapping[str, float]) -> Iterator[list[Choice]]:
    """Within it, Ray's scheduler (`scheduler`, Ray's `autoscaler.v2.scheduler` module) picks
    new nodes by `prices`; it yields the choices made, in Ray's order."""
    _install(scheduler)
    pricing = _Pricing(prices)
    token = _current.set(pricing)
    try:
        yield pricing.choices
    finally:
        _current.reset(token)


def _install(scheduler: Any) -> None:
    """Wrap Ray's two static methods; again, it wraps Ray's originals (each wrapper carries the
    one it wraps), so two callers racing to install it leave one layer, with no lock."""
    cls = scheduler.ResourceDemandScheduler
    if getattr(cls._sched_best_node, _OURS, False):
        return
    best: Callable[..., Any] = _original(cls._sched_best_node)
    try_schedule: Callable[..., Any] = _original(cls._try_schedule)
    to_launch = scheduler.SchedulingNodeStatus.TO_LAUNCH

    def sched_best_node(requests: Any, nodes: Any, *rest: Any, **named: Any) -> Any:
        pricing = _current.get()
        fresh = all(n.status == to_launch and not hasattr(n, _EXISTING) for n in nodes)
        if pricing is None or not nodes or not fresh or named:
            return best(requests, nodes, *rest, **named)
        return _cheapest(best, pricing, requests, nodes, rest)

    def try_sched(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if _current.get() is not None:
            for node in ctx._nodes:  # the context's own nodes, not copies
                setattr(node, _EXISTING, True)
        return try_schedule(ctx, *args, **kwargs)

    for wrapper, wrapped in ((try_sched, try_schedule), (sched_best_node, best)):
        setattr(wrapper, _OURS, True)
        setattr(wrapper, "__wrapped__", wrapped)  # noqa: B010 - a function has no such slot
    cls._try_schedule = staticmethod(try_sched)
    cls._sched_best_node = staticmethod(sched_best_node)


def _original(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Ray's own function, under any wrapper of ours."""
    while getattr(fn, _OURS, False):
        fn = getattr(fn, "__wrapped__")  # noqa: B009 - set by `_install`
    return fn


def _cheapest(
    best: Callable[..., Any],
    pricing: _Pricing,
    requests: Any,
    nodes: list[Any],
    rest: tuple[Any, ...],
) -> Any:
    """Ray's `_sched_best_node` over the new nodes of least $/h per request served: its reply,
    `nodes` without the one chosen (as Ray's does), and the choice remembered."""
    source, shape_keys = rest[0], (rest[3] if len(rest) > 3 else None)
    offers: list[tuple[int, str, int, float | None]] = []
    labels: dict[int, Any] = {}
    for i, node in enumerate(nodes):
        served, labels[i] = _trial(node, requests, source, shape_keys)
        if served:
            offers.append((i, node.node_type, served, pricing.prices.get(node.node_type)))
    per = {i: dph / served for i, _, served, dph in offers if dph is not None}
    if not per:  # nothing that could take it has an offer: Ray's choice
        return best(requests, nodes, *rest)
    ray_pick = best(requests, list(nodes), *rest)[0]
    # a label selector's preference comes first, as in Ray's score; then the price
    top = max(labels[i] for i in per)
    low = min(p for i, p in per.items() if labels[i] == top)
    tied = [i for i, p in per.items() if labels[i] == top and p <= low + _SAME_PRICE]
    pool = [nodes[i] for i in tied]
    chosen, remaining, left = best(requests, pool, *rest)
    picked = next(i for i in tied if not any(nodes[i] is n for n in left))
    served = next(s for i, _, s, _ in offers if i == picked)
    pricing.choices.append(
        Choice(
            node_type=nodes[picked].node_type,
            per_request=per[picked],
            dollars_per_hour=pricing.prices[nodes[picked].node_type],
            served=served,
            others=tuple(
                (name, None if dph is None else dph / s)
                for i, name, s, dph in offers
                if i != picked
            ),
            ray_choice=ray_pick.node_type,
        )
    )
    nodes.pop(picked)
    return chosen, remaining, nodes


def _trial(node: Any, requests: Any, source: Any, shape_keys: Any) -> tuple[int, Any]:
    """How many of the requests one node of this kind takes, by Ray's own placement, and the
    first part of Ray's score for it (which of a request's label selectors the node meets)."""
    remaining, score = copy.deepcopy(node).try_schedule(requests, source, shape_keys)
    return len(requests) - len(remaining), score[0]
