"""A Ray reader per cluster, following reloads (issue 14, "reload reaches everything").

`RayReaders` asks each cluster's own reader (its own head and token) about that cluster only, keeps
each answer to that cluster's records, reads a failing reader as "unknown" for its cluster alone,
and follows the specs: a cluster added by a reload gets a reader, a removed one's is dropped.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetsim.harness import API_KEY, START, VAST_URL, SimClock
from reconciler.deps import Deps
from reconciler.model.autoscaling import AutoscalerState
from reconciler.model.demand import RayReport, scripted
from reconciler.model.labels import label_for
from reconciler.model.observation import NodeKey
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.model.spec import ClusterSpec
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import client_from_settings
from reconciler.watch.controller import TickReport
from reconciler.watch.rayreaders import RayReaders
from reconciler.watch.runner import WatchOptions, watch
from reconciler.watch.source import SpecSource
from tests.scenarios.world import cluster, cluster_text
from vastsim import Market, Sim, VirtualClock
from vastsim.transport import InProcessTransport

LINEAGE = "0" * 36


def record(rid: str, name: str, *, busy: bool | None = None) -> InstanceRecord:
    return InstanceRecord(
        id=rid,
        cluster=name,
        node_type="gpu",
        managed_by=LINEAGE,
        label=label_for(name, LINEAGE, rid),
        role=Role.WORKER,
        intent=Intent.RUNNING,
        phase=Phase.RUNNING,
        created_at=START,
        offer_id=1,
        machine_id=1,
        host_id=1,
        dph_total=0.1,
        vast_id=int(rid[1:]),
        sample_busy=busy,
        sample_at=START if busy is not None else None,
    )


RECORDS = Records(
    instances={
        r.id: r
        for r in (
            record("i1", "alpha"),
            record("i2", "alpha"),
            record("i3", "beta"),
            record("i4", "gamma", busy=True),  # gamma has no reader: the agents' samples
        )
    }
)


@dataclass
class FakeReader:
    """One cluster's reader: answers as told (about any record id: the head may know others),
    or raises."""

    cluster: str
    demand_: Mapping[NodeKey, int] | None = None
    busy_: Mapping[str, bool | None] = field(default_factory=dict)
    probes_: Mapping[str, bool] = field(default_factory=dict)
    work_: Mapping[str, bool] | None = None
    raises: bool = False
    asked: list[tuple[str, Any]] = field(default_factory=list)
    closed: bool = False

    def _answer(self, question: str, arg: Any, value: Any) -> Any:
        self.asked.append((question, arg))
        if self.raises:
            raise RuntimeError(f"the Ray head of {self.cluster} is unreadable")
        return value

    def reports(self, specs: Mapping[str, ClusterSpec]) -> Mapping[str, RayReport] | None:
        """Reports for every cluster its demand names, its own or not (the readers keep only
        the reader's own cluster's)."""
        said = None if self.demand_ is None else reports_of(self.demand_)
        return self._answer("demand", sorted(specs), said)  # type: ignore[no-any-return]

    def tell(self, states: Mapping[str, AutoscalerState], now: float) -> None:
        self._answer("tell", sorted(states), None)

    def busy(self, records: Records, now: float) -> Mapping[str, bool | None]:
        return self._answer("busy", now, self.busy_)  # type: ignore[no-any-return]

    def probes(self, records: Records) -> Mapping[str, bool]:
        return self._answer("probes", None, self.probes_)  # type: ignore[no-any-return]

    def work(self, records: Records) -> Mapping[str, bool] | None:
        return self._answer("work", None, self.work_)  # type: ignore[no-any-return]

    def drain_idle(
        self, records: Records, record_ids: Sequence[str], deadline: float
    ) -> Mapping[str, bool] | None:
        return self._answer("drain_idle", list(record_ids), dict.fromkeys(record_ids, True))  # type: ignore[no-any-return]

    def unread(self) -> tuple[str, ...]:
        return ()

    def close(self) -> None:
        self.closed = True


SPECS = {name: cluster(name) for name in ("alpha", "beta", "gamma")}


def reports_of(workers: Mapping[NodeKey, int]) -> dict[str, RayReport]:
    """Ray asking for these workers, a report for each cluster they name."""
    named = {cluster for cluster, _ in workers}
    return scripted({n: s for n, s in SPECS.items() if n in named}, workers)


def readers_of(fakes: Mapping[str, FakeReader], specs: Mapping[str, ClusterSpec]) -> RayReaders:
    return RayReaders(specs, make=lambda spec: fakes.get(spec.name))


def test_each_question_goes_to_the_clusters_own_reader_and_each_answer_stays_its_own() -> None:
    alpha = FakeReader(
        "alpha",
        demand_={("alpha", "gpu"): 2, ("beta", "gpu"): 9},  # beta's demand is not alpha's to say
        busy_={"i1": True, "i2": False, "i3": True},
        probes_={"i1": True, "i3": True},
        work_={"i1": True, "i2": False, "i3": True},
    )
    beta = FakeReader(
        "beta", demand_={("beta", "gpu"): 1}, busy_={"i3": False}, work_={"i3": False}
    )
    readers = readers_of({"alpha": alpha, "beta": beta}, SPECS)
    assert set(readers.readers) == {"alpha", "beta"}  # gamma: no reader could be made

    assert readers.reports(SPECS) == reports_of({("alpha", "gpu"): 2, ("beta", "gpu"): 1})
    assert ("demand", ["alpha"]) in alpha.asked and ("demand", ["beta"]) in beta.asked
    assert readers.reports({"beta": SPECS["beta"]}) == reports_of({("beta", "gpu"): 1})
    # the readerless cluster is read from the agents' samples, as without Ray
    assert readers.busy(RECORDS, START) == {"i1": True, "i2": False, "i3": False, "i4": True}
    assert readers.probes(RECORDS) == {"i1": True}
    assert readers.work(RECORDS) == {"i1": True, "i2": False, "i3": False}

    readers.drain_idle(RECORDS, ["i2", "i3", "i4"], START)
    assert ("drain_idle", ["i2"]) in alpha.asked and ("drain_idle", ["i3"]) in beta.asked

    told = {name: AutoscalerState() for name in SPECS}
    readers.tell(told, START)  # each head is told its own cluster's state, gamma's nobody
    assert ("tell", ["alpha"]) in alpha.asked and ("tell", ["beta"]) in beta.asked


def test_a_failing_reader_is_unknown_for_its_cluster_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alpha = FakeReader("alpha", raises=True)
    beta = FakeReader("beta", demand_={("beta", "gpu"): 1}, busy_={"i3": True}, work_={"i3": True})
    readers = readers_of({"alpha": alpha, "beta": beta}, SPECS)
    with caplog.at_level(logging.WARNING, logger="ray_vast"):
        assert readers.reports(SPECS) == reports_of({("beta", "gpu"): 1})
        assert readers.reports({"alpha": SPECS["alpha"]}) is None  # unknown, not "no demand"
        busy = readers.busy(RECORDS, START)
        assert busy.get("i1") is None and busy.get("i2") is None  # unknown: never idle
        assert busy["i3"] is True
        assert readers.work(RECORDS) == {"i3": True}  # alpha's records keep their pins
        readers.drain_idle(RECORDS, ["i1", "i3"], START)  # alpha's drain fails alone
    assert ("drain_idle", ["i3"]) in beta.asked
    failures = [r for r in caplog.records if "of alpha not read" in r.getMessage()]
    assert failures and failures[0].exc_info  # the first with its traceback

    # a reader that answers None (Ray could not be read) is unknown the same way
    alpha.raises = False
    beta.work_ = None
    assert readers.work(RECORDS) is None  # nobody answered: every pin is kept


def test_a_reload_adds_a_reader_drops_a_removed_ones_and_follows_a_moved_head() -> None:
    made: list[FakeReader] = []
    tokens: set[str] = {"alpha"}  # whose token is there: beta's comes later

    def make(spec: ClusterSpec) -> FakeReader | None:
        if spec.name not in tokens:
            return None
        made.append(FakeReader(spec.name))
        return made[-1]

    readers = RayReaders({"alpha": SPECS["alpha"], "beta": SPECS["beta"]}, make=make)
    assert set(readers.readers) == {"alpha"}
    first = readers.readers["alpha"]

    tokens.add("beta")
    readers.reload({"alpha": SPECS["alpha"], "beta": SPECS["beta"]})  # tried again: it is there
    assert set(readers.readers) == {"alpha", "beta"}
    assert readers.readers["alpha"] is first  # an unchanged cluster keeps its reader

    tokens.add("gamma")
    readers.reload(SPECS)  # gamma added by a reload
    assert set(readers.readers) == {"alpha", "beta", "gamma"}

    moved = cluster("alpha", head="head: {address: 127.0.0.1, ray_port: 6391}")
    readers.reload({"alpha": moved, "gamma": SPECS["gamma"]})  # beta removed, alpha's head moved
    assert set(readers.readers) == {"alpha", "gamma"}
    assert readers.readers["alpha"] is not first and first.closed  # type: ignore[attr-defined]
    assert [r.closed for r in made if r.cluster == "beta"] == [True]

    readers.stop()
    assert readers.readers == {} and all(r.closed for r in made)


def test_a_reader_that_cannot_be_made_is_tried_again_at_the_next_reload() -> None:
    broken = True

    def make(spec: ClusterSpec) -> FakeReader:
        if broken:
            raise OSError("the Ray head is not up yet")
        return FakeReader(spec.name)

    readers = RayReaders({"alpha": SPECS["alpha"]}, make=make)
    assert readers.readers == {}
    assert readers.work(RECORDS) is None  # no Ray reader: as a controller without Ray
    broken = False
    readers.reload({"alpha": SPECS["alpha"]})
    assert set(readers.readers) == {"alpha"}


# --- through the watch loop ----------------------------------------------------------------


class LoopClock(SimClock):
    """The simulator's clock; the loop's waits advance it (`advance`) instead of sleeping."""

    def advance(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture
def sim() -> Iterator[Sim]:
    with Sim(market=Market.default(), clock=VirtualClock(START), api_key=API_KEY) as sim:
        yield sim


def test_a_cluster_added_by_a_reload_gets_its_own_reader_in_the_watch_loop(
    sim: Sim, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "alpha.yaml").write_text(cluster_text("alpha", min_workers=0))
    beta_file = specs / "beta.yaml"
    made: dict[str, list[FakeReader]] = {}

    def make(spec: ClusterSpec) -> FakeReader:
        reader = FakeReader(spec.name, demand_={}, work_={})
        made.setdefault(spec.name, []).append(reader)
        return reader

    clock = LoopClock(sim)
    client = client_from_settings(
        env={"VAST_API_KEY": API_KEY, "VAST_URL": VAST_URL},
        spec_url=None,
        clock=clock,
        transport=InProcessTransport(sim),
        settings=ClientSettings(pacing=False),
    )
    deps = Deps(
        clock=clock,
        env={},
        state_dir=tmp_path / "state",
        out=io.StringIO(),
        err=io.StringIO(),
        interactive=False,
        ask=lambda prompt: "",
        provider_factory=lambda url: client,
    )
    readers = RayReaders({"alpha": cluster("alpha")}, make=make)
    seen: list[set[str]] = []

    def on_tick(report: TickReport) -> None:
        seen.append(set(readers.readers))
        if len(seen) == 1:  # a second spec file appears
            beta_file.write_text(cluster_text("beta", min_workers=0))
        elif len(seen) == 2:  # and goes again
            beta_file.unlink()

    options = WatchOptions(
        source=SpecSource(specs), max_ticks=3, metrics=False, signals=readers, on_tick=on_tick
    )
    assert watch(deps, options, logging.getLogger("ray_vast.test")) == 0

    assert seen == [{"alpha"}, {"alpha", "beta"}, {"alpha"}]
    (beta,) = made["beta"]
    assert beta.asked, "the added cluster's reader was never asked"
    assert {q for q, _ in beta.asked} >= {"work"}
    assert beta.closed  # dropped with its spec
    assert made["alpha"][0].closed  # and every reader closed when the watch stopped
