"""The head services and Ray's readers keep serving a removed cluster while pins hold its
machines (issue 21, 6; found after the prune scenario: in `watch` a removed cluster's head
service stopped at once, so its held workers lost their heartbeats and ended themselves after
300 s, and its Ray reader was dropped, so Ray's work pinned them for good)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reconciler.model.records import Intent, Phase, Role
from reconciler.model.spec import ClusterSpec
from reconciler.watch.served import Served
from tests.planning.builders import LINEAGE, record, records, spec


class Follower:
    def __init__(self) -> None:
        self.told: list[list[str]] = []

    def reload(self, specs: Mapping[str, ClusterSpec]) -> None:
        self.told.append(sorted(specs))


def test_a_removed_cluster_is_served_while_it_has_live_machines_of_ours() -> None:
    a, b = spec(name="a"), spec(name="b")
    held = record("w1", cluster="b", vast_id=1, role=Role.WORKER, phase=Phase.SERVING)
    follower, served = Follower(), Served()
    assert served.follow([follower], {"a": a, "b": b}, records(held), LINEAGE)
    # b's spec is removed; a pin holds its worker: b is still served
    assert not served.follow([follower], {"a": a}, records(held), LINEAGE)
    assert follower.told == [["a", "b"]]
    # the pin ends and the worker is pruned: b is let go
    gone = replace(held, phase=Phase.DESTROYED, intent=Intent.DESTROYED)
    assert served.follow([follower], {"a": a}, records(gone), LINEAGE)
    assert follower.told[-1] == ["a"]


def test_machines_of_another_state_do_not_keep_a_cluster_served() -> None:
    foreign = record("w1", cluster="b", vast_id=1, role=Role.WORKER, lineage="someone-else")
    served = Served()
    served.follow([Follower()], {"b": spec(name="b")}, records(), LINEAGE)
    assert set(served.specs({}, records(foreign), LINEAGE)) == set()
