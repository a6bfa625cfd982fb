"""`ray-vast cost`: dollars from the state's records and the ledger, per second at vast's
prices, split by cause, in a window; `--json` versioned; a state written before the bill's clocks
existed still loads and is priced.

Every price here is round ($0.36/h running, $0.036/h storage: 1e-4 and 1e-5 $/s), so each figure
below is worked out by hand from the stretches of each record.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.model import cost
from reconciler.model.codec import encode
from reconciler.model.records import Intent, Phase, Records, Role, Stretch
from reconciler.state.filestore import FileStore
from reconciler.state.ledger import LedgerEvent, LedgerKind, LedgerWriter, ledger_path
from tests.planning.builders import record
from tests.scenarios.world import cluster_text

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
H = 3600.0
RUN, DISK = 0.36, 0.036  # $/h
UNTIL = T0 + 5 * H


def _records(lineage: str) -> Records:
    common: dict[str, Any] = {
        "lineage": lineage,
        "created_at": T0,
        "dph_total": RUN,
        "storage_dph": DISK,
        "first_observed_at": T0 + 60,
    }
    # a worker: booting 10 min (storage), running 5 min before Ray served, quiet twice, ended
    served = record(
        "i1",
        vast_id=20000001,
        role=Role.WORKER,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        enrolled_at=T0 + 600,
        first_running_at=T0 + 660,
        serving_at=T0 + 900,
        quiet=(Stretch(T0 + 2 * H, T0 + 2.5 * H), Stretch(T0 + 3 * H)),
        provider_seen_at=T0 + 4 * H - 30,
        provider_ok_at=T0 + 4 * H - 30,
        ended_at=T0 + 4 * H,
        ended_reason="idle_destroy",
        **common,
    )
    # a candidate that ran 10 minutes and never enrolled
    failed = record(
        "i2",
        vast_id=20000002,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        first_running_at=T0 + 1200,
        provider_ok_at=T0 + 1790,
        provider_seen_at=T0 + 1790,
        ended_at=T0 + 1800,
        ended_reason="enrollment_timeout",
        **common,
    )
    # a candidate ended while pulling, the slots being filled by others
    extra = record(
        "i3",
        vast_id=20000003,
        phase=Phase.DESTROYED,
        intent=Intent.DESTROYED,
        ended_at=T0 + 300,
        ended_reason="extra_candidate",
        **common,
    )
    # a worker of another cluster, stopped by the money chain and still stopped (disk kept)
    stopped = record(
        "i4",
        cluster="c2",
        vast_id=20000004,
        role=Role.WORKER,
        phase=Phase.STOPPED,
        intent=Intent.STOPPED,
        enrolled_at=T0 + 60,
        first_running_at=T0 + 60,
        serving_at=T0 + 120,
        quiet=(Stretch(T0 + H),),
        stopped=(Stretch(T0 + 1.5 * H),),
        provider_ok_at=T0 + 1.5 * H - 10,
        provider_seen_at=UNTIL - 30,
        **common,
    )
    # never created at vast: nothing billed
    pending = record("i5", phase=Phase.DESTROYED, intent=Intent.DESTROYED, ended_at=T0 + 5)
    everything = (served, failed, extra, stopped, pending)
    return Records(instances={r.id: r for r in everything}, next_id=6)


def make_state(state_dir: Path, *, strip_clocks: bool = False) -> None:
    """The records above and a ledger holding an orphan's destroy, the bill of a record the
    state forgot (i0), and a stale copy of i1's bill (the state's record wins)."""
    clock = FakeClock(T0)
    store = FileStore(state_dir, clock=clock)
    store.lock("test")
    try:
        first = store.write(encode(Records()), based_on=None)
        records = _records(first.lineage)
        payload = encode(records)
        if strip_clocks:  # as a state file written before the bill's clocks existed
            for doc in payload["instances"].values():
                for key in ("serving_at", "quiet", "quiet_folded", "stopped"):
                    del doc[key]
        store.write(payload, based_on=first)
    finally:
        store.unlock()
    forgotten = cost.Life(
        instance="i0",
        cluster="c1",
        node_type="gpu",
        vast_id=20000000,
        dph_total=RUN,
        storage_dph=DISK,
        start=T0,
        end=T0 + H,
        running_from=T0,
        running_until=None,
        serving_from=T0,
    )
    stale = cost.life_of(replace(records.instances["i1"], dph_total=100.0))
    assert stale is not None
    with LedgerWriter.open(ledger_path(state_dir), clock=clock) as ledger:
        for life in (forgotten, stale):
            ledger.append(
                LedgerEvent(
                    "c1",
                    LedgerKind.REPORT,
                    cost.BILL_CLASS,
                    "bill",
                    record=life.instance,
                    instance=life.vast_id,
                    data=cost.bill_entry(life),
                )
            )
        clock.advance(1000)
        ledger.append(
            LedgerEvent(
                "c1",
                LedgerKind.OUTCOME,
                "orphan",
                "instance 20000009 destroyed",
                instance=20000009,
                dph=-0.72,
                data={"action": "destroy", "outcome": "ok", "first_seen": T0 + 400},
            )
        )


def run(state_dir: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, ["cost", "--state-dir", str(state_dir), "--until", str(UNTIL), *args]
    )
    return result.exit_code, result.stdout, result.stderr


def view(state_dir: Path, *args: str) -> dict[str, Any]:
    code, out, err = run(state_dir, "--json", *args)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


# By hand, to UNTIL (5 h after T0):
# i1 booting 600 s x 1e-5 + 300 s x 1e-4 = 0.036; serving (6300 + 1800) s = 0.81; idle 5400 s = 0.54
# i2 failed 1200 s x 1e-5 + 600 s x 1e-4 = 0.072;   i3 extra 300 s x 1e-5 = 0.003
# i4 booting 60 s x 1e-5 + 60 s x 1e-4 = 0.0066; serving 3480 s = 0.348; idle 1800 s = 0.18;
#    stopped 12600 s x 1e-5 = 0.126
# i0 (the ledger's) serving 3600 s = 0.36;  the orphan 600 s x 2e-4 = 0.12
EXPECTED = {
    "serving": 0.81 + 0.348 + 0.36,
    "idle": 0.54 + 0.18,
    "booting": 0.036 + 0.0066,
    "failed": 0.072,
    "extra_candidate": 0.003,
    "orphan": 0.12,
    "stopped": 0.126,
}


def test_dollars_by_cause_from_the_records_and_the_ledger(tmp_path: Path) -> None:
    make_state(tmp_path)
    doc = view(tmp_path)
    assert doc["format_version"] == "1.0"
    assert doc["currency"] == "USD"
    assert doc["until"] == UNTIL and doc["since"] is None
    assert doc["by_cause"] == pytest.approx(EXPECTED, abs=1e-9)
    assert doc["dollars"] == pytest.approx(sum(EXPECTED.values()), abs=1e-9)
    groups = {g["key"]: g for g in doc["groups"]}
    assert set(groups) == {"c1", "c2"}
    assert groups["c2"]["dollars"] == pytest.approx(0.0066 + 0.348 + 0.18 + 0.126, abs=1e-9)
    assert groups["c2"]["by_cause"]["stopped"] == pytest.approx(0.126, abs=1e-9)
    assert doc["first_bill"] == T0


def test_by_instance_node_type_and_cause(tmp_path: Path) -> None:
    make_state(tmp_path)
    instances = {g["key"]: g["dollars"] for g in view(tmp_path, "--by", "instance")["groups"]}
    assert instances == pytest.approx(
        {
            "i0": 0.36,
            "i1": 0.036 + 0.81 + 0.54,
            "i2": 0.072,
            "i3": 0.003,
            "i4": 0.0066 + 0.348 + 0.18 + 0.126,
            "vast:20000009": 0.12,
        },
        abs=1e-9,
    )
    types = {g["key"] for g in view(tmp_path, "--by", "node-type")["groups"]}
    assert types == {"c1/gpu", "c2/gpu", "c1/(orphan)"}
    causes = {g["key"]: g["dollars"] for g in view(tmp_path, "--by", "cause")["groups"]}
    assert causes == pytest.approx(EXPECTED, abs=1e-9)


def test_a_window_prices_only_the_seconds_inside_it(tmp_path: Path) -> None:
    make_state(tmp_path)
    doc = view(tmp_path, "--since", str(T0 + 2 * H), "--until", str(T0 + 3 * H))
    # i1: quiet 2h..2.5h, serving 2.5h..3h; i4 stopped all hour; nothing else billed then
    assert doc["by_cause"] == pytest.approx(
        {**dict.fromkeys(EXPECTED, 0.0), "idle": 0.18, "serving": 0.18, "stopped": 0.036},
        abs=1e-9,
    )
    assert {g["key"] for g in doc["groups"]} == {"c1", "c2"}


def test_the_human_table(tmp_path: Path) -> None:
    make_state(tmp_path)
    code, out, _ = run(tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        "Cost 2027-01-15 08:00 UTC to 2027-01-15 13:00 UTC, by cluster (vast's prices, per second)"
    )
    assert lines[1].split() == [
        "cluster",
        "dollars",
        "hours",
        "serving",
        "idle",
        "booting",
        "failed",
        "extra",
        "orphan",
        "stopped",
    ]
    assert lines[2].split()[:2] == ["c1", "1.94"]
    assert lines[3].split()[:2] == ["c2", "0.66"]
    assert lines[4].split()[:2] == ["total", "2.60"]
    assert lines[-1].startswith("Total: $2.60 over ")
    code, out, _ = run(tmp_path, "--by", "cause")
    assert code == 0
    assert "idle" in out and "quiet but kept" in out and "%" in out


def test_specs_limit_it_to_their_clusters(tmp_path: Path) -> None:
    make_state(tmp_path / "state")
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "c2.yaml").write_text(cluster_text("c2"))
    doc = view(tmp_path / "state", str(specs))
    assert [g["key"] for g in doc["groups"]] == ["c2"]


def test_a_state_written_before_the_clocks_existed_still_loads(tmp_path: Path) -> None:
    make_state(tmp_path, strip_clocks=True)
    doc = view(tmp_path)
    # without `serving_at` an ended worker cannot say it served, nor can i4; without its
    # stopped stretch, i4's GPU bill ends at the last listing that showed it running (10 s
    # before its stop): every dollar is still counted, at the same prices
    assert doc["dollars"] == pytest.approx(sum(EXPECTED.values()) - 10 * (RUN - DISK) / H)
    assert doc["by_cause"]["serving"] == pytest.approx(0.36)  # the ledger's bill only


def test_nothing_billed_and_bad_options(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path)
    assert code == 0
    assert "nothing billed in this window" in out
    code, _, err = run(tmp_path, "--by", "host")
    assert code == 1
    assert "--by is one of cluster, node-type, cause, instance" in err
    code, _, err = run(tmp_path, "--since", str(UNTIL + 1))
    assert code == 1
    assert "--since is not before --until" in err
