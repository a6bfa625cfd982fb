"""A heartbeat's clocks are kept in memory and written within seconds (`Journal.keep`).

Every save writes the whole state: at 1,000 workers a save took ~0.3 s here and heartbeats come
33 a second, so a head that saved on every heartbeat could not keep up (bench/heartbeat_scale.py).
A change of clocks only is current at once for every decision, and is written with the next save
or `KEPT_CLOCKS_SECONDS` after the first change kept, by the caller's clock; a watch that stops
writes it; a crash loses at most that much of a report clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler import settings
from reconciler.applying.journal import Journal, records_of
from reconciler.clock import SystemClock
from reconciler.model.codec import encode
from reconciler.model.evolve import evolve
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.state.ledger import LedgerWriter
from reconciler.state.memory import MemoryStore

KEPT = settings.KEPT_CLOCKS_SECONDS


def worker(rid: str) -> InstanceRecord:
    return InstanceRecord(
        id=rid,
        cluster="c",
        node_type="gpu",
        managed_by="lineage",
        label=f"rv.c.lineage.{rid}",
        role=Role.WORKER,
        intent=Intent.RUNNING,
        phase=Phase.SERVING,
        created_at=0.0,
        vast_id=7,
        offer_id=1,
        machine_id=1,
        host_id=1,
        dph_total=0.1,
        self_report_at=0.0,
    )


def beat(records: Records, at: float) -> Records:
    """The records after a heartbeat of w1 at `at` (its clocks only)."""
    moved = evolve(records.instances["w1"], self_report_at=at, sample_at=at, sample_busy=True)
    return replace(records, instances={**records.instances, "w1": moved})


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    store = MemoryStore(clock=SystemClock())
    store.lock("watch")
    first = Records(instances={"w1": worker("w1")})
    ledger = LedgerWriter.open(tmp_path / "ledger.jsonl", clock=SystemClock())
    try:
        yield Journal(store, ledger, store.write(encode(first), based_on=None))
    finally:
        ledger.close()


def written(journal: Journal) -> float | None:
    """w1's report clock in the state as written (what a restarted watch would read)."""
    return records_of(journal.store.read()).instances["w1"].self_report_at


def test_kept_clocks_are_current_at_once_and_written_after_the_window(journal: Journal) -> None:
    serial = journal.serial
    journal.keep(beat(journal.records(), 100.0), 100.0)
    assert journal.records().instances["w1"].self_report_at == 100.0  # every decision sees it
    assert journal.serial == serial and written(journal) == 0.0  # nothing written yet
    journal.keep(beat(journal.records(), 100.0 + KEPT - 1), 100.0 + KEPT - 1)
    assert journal.serial == serial
    journal.keep(beat(journal.records(), 100.0 + KEPT), 100.0 + KEPT)
    assert journal.serial == serial + 1 and written(journal) == 100.0 + KEPT
    # the window starts again from the next change kept
    journal.keep(beat(journal.records(), 200.0), 200.0)
    assert journal.serial == serial + 1 and written(journal) == 100.0 + KEPT


def test_a_save_writes_the_clocks_kept_with_it(journal: Journal) -> None:
    journal.keep(beat(journal.records(), 50.0), 50.0)
    journal.update(lambda r: replace(r, next_id=r.next_id + 1))
    assert written(journal) == 50.0
    # a save of exactly the records kept writes them too (the controller's tick saves)
    journal.keep(beat(journal.records(), 55.0), 55.0)
    journal.save(journal.records())
    assert written(journal) == 55.0


def test_a_watch_that_stops_writes_what_it_kept(journal: Journal) -> None:
    journal.keep(beat(journal.records(), 70.0), 70.0)
    journal.flush()
    assert written(journal) == 70.0
    serial = journal.serial
    journal.flush()  # nothing kept: nothing written
    assert journal.serial == serial
