"""One cluster's failure stays that cluster's (issue 14, "failures contained").

Two clusters in one controller on virtual time. An exception is injected into alpha's part of the
tick (its listing and plan, then its nets): alpha is logged with the traceback, noted once in the
ledger and retried with backoff, 5 s doubling; beta keeps reconciling in the same ticks (a worker
of its that ends is replaced); the loop never stops.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from fleetsim.agents import ContainerFault
from fleetsim.harness import START, fleet
from reconciler.applying.observe import observe_and_plan
from reconciler.model.spec import ClusterSpec
from reconciler.nets import dispatch
from reconciler.nets.base import NetResult
from tests.scenarios.world import M, cluster, lines, run, workers

ALPHA = cluster("alpha", min_workers=1)
BETA = cluster("beta", min_workers=1)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def watch_log() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("ray_vast")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _gaps(times: Sequence[float]) -> list[float]:
    """Between the ticks that tried (the shared listing and alpha's own, in one tick, are one)."""
    ticks = sorted(set(times))
    return [round(b - a) for a, b in itertools.pairwise(ticks)]


def test_a_reconcile_that_raises_for_one_cluster_leaves_the_other_reconciling(
    monkeypatch: pytest.MonkeyPatch, watch_log: Lines
) -> None:
    with fleet([ALPHA, BETA]) as f:
        run(f, START + 10 * M)
        alpha, beta = workers(f, "alpha"), workers(f, "beta")
        assert len(alpha) == 1 and len(beta) == 1

        tries: list[float] = []
        real = observe_and_plan

        def buggy(provider: Any, specs: Sequence[ClusterSpec], *args: Any, **kw: Any) -> Any:
            if any(s.name == "alpha" for s in specs):
                tries.append(f.clock.now())
                raise RuntimeError("a bug in alpha's plan")
            return real(provider, specs, *args, **kw)

        monkeypatch.setattr("reconciler.watch.controller.observe_and_plan", buggy)
        # beta's worker ends while alpha fails: beta's reconcile replaces it
        (ending,) = beta
        f.faults[ending] = ContainerFault(ray_exits_at=f.clock.now() + 30)
        run(f, f.clock.now() + 15 * M)

        assert workers(f, "alpha") == alpha  # nothing of alpha was changed by its failure
        replaced = workers(f, "beta")
        assert len(replaced) == 1 and replaced != beta
        listed_at = f.controller.agenda.listed_at
        assert listed_at["beta"] > listed_at.get("alpha", 0.0)
        # alpha retried with backoff: 5 s doubling, capped at 5 minutes
        assert _gaps(tries)[:6] == [5, 10, 20, 40, 80, 160]
        assert max(_gaps(tries)) <= 300
        failed = lines(f, "tick_failed")
        assert [(e["cluster"], e["kind"]) for e in failed] == [("alpha", "note")]
        assert failed[0]["data"]["error_type"] == "RuntimeError"
        assert failed[0]["data"]["error"] == "a bug in alpha's plan"
        logged = [r for r in watch_log.records if r.levelno == logging.ERROR]
        assert logged and logged[0].exc_info is not None
        assert "alpha" in logged[0].getMessage()

        # fixed: alpha reconciles again, and the ledger says so once
        monkeypatch.undo()
        run(f, f.clock.now() + 6 * M)
        assert "alpha" not in f.controller.containment.failing
        assert [e["cluster"] for e in lines(f, "tick_recovered")] == ["alpha"]
        assert len(lines(f, "tick_failed")) == 1


def test_a_net_that_raises_for_one_cluster_leaves_the_other_reconciling(
    watch_log: Lines,
) -> None:
    with fleet([ALPHA, BETA]) as f:
        run(f, START + 10 * M)
        beta = workers(f, "beta")
        real = dispatch.MACHINE_NETS["went_silent"]

        def buggy(
            records: Any, specs: Mapping[str, ClusterSpec], **kw: Any
        ) -> NetResult:  # alpha's net has a bug
            if "alpha" in specs:
                raise KeyError("alpha-net")
            return real(records, specs, **kw)

        f.controller.use_nets(
            {**f.controller.nets, "went_silent": dispatch.machine("went_silent", buggy)}
        )
        (ending,) = beta
        f.faults[ending] = ContainerFault(ray_exits_at=f.clock.now() + 30)
        run(f, f.clock.now() + 15 * M)

        replaced = workers(f, "beta")
        assert len(replaced) == 1 and replaced != beta
        assert "alpha" in f.controller.containment.failing
        assert "beta" not in f.controller.containment.failing
        failed = lines(f, "tick_failed")
        assert [e["cluster"] for e in failed] == ["alpha"]
        assert failed[0]["data"] == {
            "part": "nets",
            "error_type": "KeyError",
            "error": "'alpha-net'",
        }


def test_a_signal_read_that_raises_is_unknown_and_noted_once() -> None:
    with fleet([ALPHA, BETA]) as f:
        run(f, START + 10 * M)
        before = workers(f, "alpha") | workers(f, "beta")

        def broken(records: Any, now: float) -> Mapping[str, bool | None]:
            raise ValueError("Ray's answer does not parse")

        f.controller.signals.busy = broken  # type: ignore[method-assign]
        run(f, f.clock.now() + 10 * M)
        assert workers(f, "alpha") | workers(f, "beta") == before  # unknown is never "idle"
        failed = lines(f, "tick_failed")
        assert sorted(e["cluster"] for e in failed) == ["alpha", "beta"]
        assert {e["data"]["part"] for e in failed} == {"ray_busy"}
        assert f.controller.containment.failing == {}
