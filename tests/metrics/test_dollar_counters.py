"""`watch`'s dollars by cause: `ray_vast_dollars_total{cluster, cause}`, the accounting of
`ray-vast cost`, as counters that never go down (a record retention drops keeps its dollars; an
orphan's come from the ledger line of its destroy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.clock import FakeClock
from reconciler.model.records import Intent, Phase, Records, Role
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter
from reconciler.state.tails import FileTail
from reconciler.watch.metrics import DollarCounter, Gauges, render
from tests.planning.builders import record

T0 = 1_800_000_000.0


def test_the_counters_are_rendered_by_cluster_and_cause() -> None:
    text = render(Gauges(dollars={("c1", "idle"): 1.5, ("c1", "serving"): 10.25}))
    assert "# TYPE ray_vast_dollars_total counter" in text
    assert 'ray_vast_dollars_total{cause="idle",cluster="c1"} 1.5' in text
    assert 'ray_vast_dollars_total{cause="serving",cluster="c1"} 10.25' in text


def test_they_count_from_the_start_and_keep_what_retention_drops(tmp_path: Path) -> None:
    worker = record(
        "i1",
        vast_id=7,
        role=Role.WORKER,
        phase=Phase.SERVING,
        created_at=T0 - 3600,
        enrolled_at=T0 - 3600,
        serving_at=T0 - 3600,
        dph_total=0.36,
        storage_dph=0.036,
    )
    ledger = tmp_path / "ledger.jsonl"
    counter = DollarCounter(T0, FileTail(ledger))
    first = counter.update(Records(instances={"i1": worker}), T0 + 100)
    assert first == pytest.approx({("c1", "serving"): 0.01})  # 100 s at 1e-4 $/s, from T0
    ended = Records(
        instances={
            "i1": record(
                "i1",
                vast_id=7,
                role=Role.WORKER,
                phase=Phase.DESTROYED,
                intent=Intent.DESTROYED,
                created_at=T0 - 3600,
                enrolled_at=T0 - 3600,
                serving_at=T0 - 3600,
                ended_at=T0 + 200,
                dph_total=0.36,
                storage_dph=0.036,
            )
        }
    )
    assert counter.update(ended, T0 + 300) == pytest.approx({("c1", "serving"): 0.02})
    with LedgerWriter.open(ledger, clock=FakeClock(T0 + 400)) as writer:
        writer.append(
            LedgerEvent(
                "c1",
                LedgerKind.OUTCOME,
                "orphan",
                "instance 9 destroyed",
                instance=9,
                dph=-0.72,
                data={"action": "destroy", "outcome": "ok", "first_seen": T0 + 300},
            )
        )
    # retention dropped i1; the orphan billed 100 s at 2e-4 $/s
    assert counter.update(Records(), T0 + 500) == pytest.approx(
        {("c1", "serving"): 0.02, ("c1", "orphan"): 0.02}
    )
