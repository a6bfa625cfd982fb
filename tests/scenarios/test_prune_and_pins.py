"""Pins hold against prune (DESIGN.md 11): a removed spec does not end a machine that Ray work or
a person's pin holds; it is held with an alert (`status`, the ledger, the log) until the work or
the pin ends, then pruned. `down` ends everything.

Point 6 of issue 21: `_retire` destroyed every live machine of a removed cluster, pinned or not,
so removing or renaming a spec file ended a machine in the middle of Ray work, or one a person
pinned.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fleetsim.agents import ContainerFault, Span
from fleetsim.harness import START, Fleet, fleet
from reconciler.model.orders import PinOrder
from reconciler.model.records import Records
from reconciler.planning import teardown
from reconciler.state import orders
from reconciler.views import status as status_view
from reconciler.views import status_text
from reconciler.watch.orders import take_orders
from tests.scenarios.world import M, Signals, alive, cluster, ended_by, lines, run, workers

GONE = cluster("gone", min_workers=3, max_workers=3, factor=1)
HELD = "prune_held"


@dataclass
class Story:
    """The fleet with its three workers: `busy` has Ray work until `work_ends`, `pinned` is
    pinned by a person, `idle` has neither; `said` is the controller's log."""

    f: Fleet
    state_dir: Path
    busy: int
    pinned: int
    idle: int
    work_ends: list[float] = field(default_factory=lambda: [float("inf")])
    said: list[str] = field(default_factory=list)

    def order(self, order: PinOrder) -> None:
        """`ray-vast pin` / `unpin` while watch runs: through its mailbox."""
        mailbox = orders.FileOrders(self.state_dir)
        mailbox.leave(orders.Order.pin(order, at=self.f.clock.now()))
        take_orders(mailbox, self.f.controller, logging.getLogger("scenario"))

    def record_of(self, vast_id: int) -> str:
        records = self.f.controller.records()
        return next(r.id for r in records.instances.values() if r.vast_id == vast_id and r.live)


@contextmanager
def removed_with_work_and_a_pin(state_dir: Path) -> Iterator[Story]:
    """Three workers, one with Ray work and one pinned by a person; then the spec is removed and
    `watch --allow-mass-destroy` prunes."""
    with fleet(GONE, working=lambda now: False) as f:
        run(f, START + 10 * M)
        busy, pinned, idle = sorted(workers(f, "gone"))
        story = Story(f, state_dir, busy, pinned, idle)
        f.controller.progress = story.said.append

        def work_at(now: float, records: Records) -> Mapping[str, bool]:
            return {
                r.id: r.vast_id == busy and now < story.work_ends[0]
                for r in records.instances.values()
            }

        f.controller.signals = Signals(f.clock, work_at=work_at)
        story.order(PinOrder(str(pinned), "alice@box", reason="debugging a hang"))
        run(f, f.clock.now() + 2 * M)

        # the spec file is removed: an unattended watch holds the prune of the whole cluster
        f.controller.set_specs({}, revision="rev-2")
        run(f, f.clock.now() + 5 * M)
        assert alive(f, "gone") == {busy, pinned, idle}
        refused = [a for a in f.controller.records().alerts if a.cls == "mass_destroy_refused"]
        assert [a.cluster for a in refused] == ["gone"]

        # a person says yes (`watch --allow-mass-destroy`): what nothing holds is pruned
        f.controller.allow_mass_destroy = True
        run(f, f.clock.now() + 5 * M)
        yield story


def test_a_removed_spec_prunes_the_idle_and_holds_work_and_pins_until_they_end(
    tmp_path: Path,
) -> None:
    with removed_with_work_and_a_pin(tmp_path) as s:
        f = s.f
        assert alive(f, "gone") == {s.busy, s.pinned}, "only the idle worker is pruned"
        assert ended_by(f)[s.idle] == "removed_from_spec"
        held = {s.record_of(s.busy), s.record_of(s.pinned)}

        # held with an alert: in `status`, the ledger and the log
        records = f.controller.records()
        assert {a.record for a in records.alerts if a.cls == HELD} == held
        view = status_view.build(
            records,
            f.client.list_instances(),
            [],
            lineage=f.controller.journal.lineage,
            serial=0,
            now=f.clock.now(),
            error=None,
        )
        (gone,) = [c for c in view["clusters"] if c["name"] == "gone"]
        assert {a["record"] for a in gone["alerts"] if a["class"] == HELD} == held
        shown = status_text.human(view)
        assert "ray work" in shown and "alice@box" in shown and HELD in shown
        assert {e["record"] for e in lines(f, HELD, "detection")} == held
        assert len([line for line in s.said if HELD in line]) == 2
        # said once, not at every prune
        run(f, f.clock.now() + 10 * M)
        assert len(lines(f, HELD, "detection")) == 2

        # Ray's work ends: that worker is pruned; the pinned one stays
        s.work_ends[0] = f.clock.now()
        run(f, f.clock.now() + 3 * M)
        assert alive(f, "gone") == {s.pinned}
        assert ended_by(f)[s.busy] == "removed_from_spec"

        # `ray-vast unpin`: the last one is pruned
        s.order(PinOrder(str(s.pinned), "alice@box", unpin=True))
        run(f, f.clock.now() + 3 * M)
        assert alive(f, "gone") == set()
        assert ended_by(f)[s.pinned] == "removed_from_spec"


def test_down_ends_the_machines_a_prune_holds(tmp_path: Path) -> None:
    with removed_with_work_and_a_pin(tmp_path) as s:
        f = s.f
        assert alive(f, "gone") == {s.busy, s.pinned}
        plan = teardown.down_plan(
            "gone",
            f.client.list_instances(),
            f.controller.records(),
            lineage=f.controller.journal.lineage,
            serial=f.controller.journal.serial,
            now=f.clock.now(),
        )
        f.controller.applier.commit(plan)
        f.controller.applier.carry_out(plan.actions)
        run(f, f.clock.now() + 2 * M)
        assert alive(f, "gone") == set()
        assert {ended_by(f)[v] for v in (s.busy, s.pinned)} == {"down"}


def test_a_held_machine_of_a_removed_spec_that_vast_no_longer_lists_is_closed(
    tmp_path: Path,
) -> None:
    """The adversary's seed 186: a worker Ray work held against the prune lost the head and
    destroyed itself through vast, its report unheard. No spec's limits looked at a removed
    cluster's records, and the pin (and the mass-destroy guard) held the prune: the record
    stayed live to the end of the run, priced as running. vast's listing proves it runs
    nothing; the record is closed, while the machines the pin and the work hold stay."""
    with removed_with_work_and_a_pin(tmp_path) as s:
        f = s.f
        f.controller.allow_mass_destroy = False  # nobody said yes again: the guard holds
        assert alive(f, "gone") == {s.busy, s.pinned}
        f.faults[s.busy] = ContainerFault(head_unreachable=Span(f.clock.now()))
        run(f, f.clock.now() + 15 * M)
        gone = f.sim.instance(s.busy)
        assert gone is None or gone.destroyed_at is not None, "it did not destroy itself"
        records = f.controller.records().instances.values()
        [record] = [r for r in records if r.vast_id == s.busy]
        assert not record.live, (record.phase, record.intent)
        assert ended_by(f)[s.busy] == "missing_from_listing"
        assert alive(f, "gone") == {s.pinned}  # the pin still holds the other
