"""`ray-vast pin` and `unpin`: a person's hold on a machine, kept in the state file (under the
lock, through the journal) and in the ledger, refused clearly for what it must not touch."""

from __future__ import annotations

import io
import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler import handoff, operations
from reconciler.applying.journal import records_of
from reconciler.cli import app
from reconciler.clock import FakeClock
from reconciler.deps import Deps
from reconciler.model.codec import encode
from reconciler.model.orders import PinOrder
from reconciler.model.records import InstanceRecord, Intent, Phase, Records, Role
from reconciler.state import orders
from reconciler.state.filestore import FileStore
from reconciler.state.ledger import read_ledger
from reconciler.state.lock import Identity
from reconciler.views import status as status_view
from reconciler.views import status_text
from tests.planning.builders import OTHER_LINEAGE, record

NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC
HOST = socket.gethostname()


def make_state(state_dir: Path, clock: FakeClock) -> str:
    """A state whose records i1..i4 are: ours and serving, ours and Ray-pinned, destroyed, and
    another state's. Returns the lineage."""
    store = FileStore(state_dir, clock=clock)
    store.lock("test")
    try:
        first = store.write(encode(Records()), based_on=None)
        lineage = first.lineage
        serving = {"role": Role.WORKER, "phase": Phase.SERVING, "request": None}
        instances = {
            "i1": record("i1", vast_id=20000001, lineage=lineage, **serving),
            "i2": record("i2", vast_id=20000002, lineage=lineage, pinned=True, **serving),
            "i3": record(
                "i3",
                vast_id=20000003,
                lineage=lineage,
                role=Role.WORKER,
                phase=Phase.DESTROYED,
                intent=Intent.DESTROYED,
                ended_reason="went_silent",
            ),
            "i4": record("i4", vast_id=20000004, lineage=OTHER_LINEAGE, **serving),
        }
        store.write(encode(Records(instances=instances, next_id=5)), based_on=first)
    finally:
        store.unlock()
    return lineage


def instances(state_dir: Path) -> dict[str, InstanceRecord]:
    snapshot = FileStore(state_dir, clock=FakeClock(NOW)).read()
    return dict(records_of(snapshot).instances)


def ledger(state_dir: Path, cls: str) -> list[dict[str, object]]:
    return [e.to_json() for e in read_ledger(state_dir / "ledger.jsonl") if e.class_ == cls]


def deps(state_dir: Path, clock: FakeClock) -> tuple[Deps, io.StringIO]:
    out = io.StringIO()
    made = Deps(
        clock=clock,
        env={},
        state_dir=state_dir,
        out=out,
        err=io.StringIO(),
        interactive=False,
        ask=input,
    )
    return made, out


# --- the operations, on a fake clock -------------------------------------------------------


def test_pin_for_a_duration_holds_the_machine_until_then_and_is_ledgered(tmp_path: Path):
    clock = FakeClock(NOW)
    make_state(tmp_path, clock)
    before = instances(tmp_path)
    d, out = deps(tmp_path, clock)
    order = PinOrder("20000001", "alice@box", None, handoff.parse_duration("2h"))
    assert handoff.pin(d, order) == 0
    after = instances(tmp_path)
    pinned = after["i1"]
    assert (pinned.pinned_by, pinned.pinned_until) == ("alice@box", NOW + 7200)
    assert pinned.held(NOW + 7199) and not pinned.held(NOW + 7200)
    assert not pinned.pinned  # Ray's flag is Ray's
    assert "i1 (vast 20000001, c1/gpu) pinned until 2027-01-15 10:00 UTC by alice@box" in (
        out.getvalue()
    )
    [line] = ledger(tmp_path, "pin")
    assert (line["kind"], line["record"], line["instance"]) == ("decision", "i1", 20000001)
    assert line["data"] == {
        "who": "alice@box",
        "reason": None,
        "until": NOW + 7200,
        "replaces": None,
    }
    # nothing else changed in the records
    assert after == {
        **before,
        "i1": replace(before["i1"], pinned_by="alice@box", pinned_until=NOW + 7200),
    }


def test_pin_of_a_pinned_record_replaces_the_pin(tmp_path: Path):
    clock = FakeClock(NOW)
    make_state(tmp_path, clock)
    d, out = deps(tmp_path, clock)
    handoff.pin(d, PinOrder("i1", "alice@box", None, 3600.0))
    clock.advance(600)
    handoff.pin(d, PinOrder("i1", "bob@box", "eval run", None))
    pinned = instances(tmp_path)["i1"]
    assert (pinned.pinned_by, pinned.pinned_until) == ("bob@box (eval run)", None)
    assert pinned.held(NOW + 10 * 86400)  # until unpinned
    assert "(the previous pin is replaced)" in out.getvalue()
    first, second = ledger(tmp_path, "pin")
    assert str(first["message"]).startswith("pinned by alice@box until 2027-01-15 09:00 UTC")
    assert str(second["message"]).startswith("pin replaced by bob@box until `ray-vast unpin`")
    assert second["data"] == {
        "who": "bob@box",
        "reason": "eval run",
        "until": None,
        "replaces": {"by": "alice@box", "until": NOW + 3600},
    }


def test_an_ended_pin_is_not_replaced_but_pinned_anew(tmp_path: Path):
    clock = FakeClock(NOW)
    make_state(tmp_path, clock)
    d, _ = deps(tmp_path, clock)
    handoff.pin(d, PinOrder("i1", "alice@box", None, 60.0))
    clock.advance(61)
    handoff.pin(d, PinOrder("i1", "alice@box", None, 60.0))
    assert instances(tmp_path)["i1"].pinned_until == NOW + 121
    assert [e["data"]["replaces"] for e in ledger(tmp_path, "pin")] == [None, None]  # type: ignore[index]


def test_unpin_ends_a_persons_pin_and_leaves_rays_hold(tmp_path: Path):
    clock = FakeClock(NOW)
    make_state(tmp_path, clock)
    d, out = deps(tmp_path, clock)
    handoff.pin(d, PinOrder("i2", "alice@box", None, None))
    assert handoff.pin(d, PinOrder("20000002", "bob@box", unpin=True)) == 0
    record = instances(tmp_path)["i2"]
    assert (record.pinned_by, record.pinned_until, record.pinned) == (None, None, True)
    assert "Ray reports work on it, which still holds it" in out.getvalue()
    [line] = ledger(tmp_path, "unpin")
    assert line["record"] == "i2" and line["data"] == {
        "who": "bob@box",
        "was": {"by": "alice@box", "until": None},
    }
    # unpinning again changes nothing and writes nothing
    snapshot = FileStore(tmp_path, clock=clock).read()
    assert handoff.pin(d, PinOrder("i2", "bob@box", unpin=True)) == 0
    assert FileStore(tmp_path, clock=clock).read().serial == snapshot.serial  # type: ignore[union-attr]
    assert len(ledger(tmp_path, "unpin")) == 1
    assert "is not pinned by a person" in out.getvalue()


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("20009999", "no record of vast instance 20009999 in this state"),
        ("i99", "no record 'i99' in this state"),
        ("i3", "i3 (vast 20000003, c1/gpu) has ended (went_silent); there is nothing to pin"),
        ("20000004", "i4 (vast 20000004, c1/gpu) belongs to another state (lineage 99999999"),
    ],
)
def test_pin_refuses_unknown_ended_and_foreign_records(tmp_path: Path, target: str, says: str):
    clock = FakeClock(NOW)
    make_state(tmp_path, clock)
    before = FileStore(tmp_path, clock=clock).read()
    d, _ = deps(tmp_path, clock)
    with pytest.raises(operations.OperationError, match="^" + re.escape(says)):
        handoff.pin(d, PinOrder(target, "alice@box"))
    after = FileStore(tmp_path, clock=clock).read()
    assert after is not None and before is not None and after.serial == before.serial
    assert ledger(tmp_path, "pin") == []
    assert not (tmp_path / "state.lock").exists()  # the lock was given back


@pytest.mark.parametrize("text", ["2x", "h", "0m", "-5m", "1.5.2h", ""])
def test_bad_durations_are_refused(text: str):
    with pytest.raises(operations.OperationError, match="use a number and a unit"):
        handoff.parse_duration(text)


def test_durations():
    assert [handoff.parse_duration(t) for t in ("90s", "30m", "2h", "1d", "1.5h")] == [
        90,
        1800,
        7200,
        86400,
        5400,
    ]


def test_a_pin_shows_in_status(tmp_path: Path):
    clock = FakeClock(NOW)
    lineage = make_state(tmp_path, clock)
    d, _ = deps(tmp_path, clock)
    handoff.pin(d, PinOrder("i1", "alice@box", None, 6 * 3600.0))
    records, _, serial = d.read_records()
    view = status_view.build(records, [], [], lineage=lineage, serial=serial, now=NOW, error=None)
    text = status_text.human(view)
    assert "[pinned by alice@box until 14:00 UTC]" in text
    assert "[pinned: ray work]" in text  # i2


# --- the command ---------------------------------------------------------------------------


def invoke(state_dir: Path, *args: str):
    env = {"USER": "alice", "VAST_URL": "http://127.0.0.1:9"}
    return CliRunner().invoke(
        app,
        [*args, "--state-dir", str(state_dir)],
        env=env,
    )


def test_the_command_pins_as_user_at_host_and_unpins(tmp_path: Path):
    make_state(tmp_path, FakeClock(NOW))
    pinned = invoke(tmp_path, "pin", "20000001", "--for", "2h", "--reason", "eval run")
    assert pinned.exit_code == 0, pinned.output
    record = instances(tmp_path)["i1"]
    assert record.pinned_by == f"alice@{HOST} (eval run)"
    assert record.pinned_until is not None
    [line] = ledger(tmp_path, "pin")
    assert line["data"]["who"] == f"alice@{HOST}"  # type: ignore[index]
    # the pin's end is two hours after the ledger line's time (the same clock reading)
    assert record.pinned_until == pytest.approx(float(line["time"]) + 7200, abs=1.0)  # type: ignore[arg-type]
    unpinned = invoke(tmp_path, "unpin", "i1")
    assert unpinned.exit_code == 0, unpinned.output
    assert instances(tmp_path)["i1"].pinned_by is None


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("pin", "i3"), "has ended (went_silent)"),
        (("pin", "20000004"), "belongs to another state"),
        (("pin", "i99"), "no record 'i99'"),
        (("unpin", "i3"), "there is nothing to unpin"),
        (("pin", "i1", "--for", "soon"), "--for 'soon': use a number and a unit"),
    ],
)
def test_the_command_refuses_in_one_line_with_exit_1(
    tmp_path: Path, args: tuple[str, ...], says: str
):
    make_state(tmp_path, FakeClock(NOW))
    outcome = invoke(tmp_path, *args)
    assert outcome.exit_code == 1
    assert outcome.stderr.startswith("Error: ") and says in outcome.stderr
    assert outcome.stderr.count("\n") == 1 and "Traceback" not in outcome.output
    assert instances(tmp_path)["i1"].pinned_by is None


def test_a_running_watch_is_handed_the_pin_and_decides_it_under_its_own_lock(tmp_path: Path):
    """`watch` holds the state lock for as long as it runs: the pin goes to its mailbox, and the
    watch's loop takes it (decided, saved, ledgered) at its next turn."""
    make_state(tmp_path, FakeClock(NOW))
    watch = FileStore(tmp_path, clock=FakeClock(NOW), identity=Identity("ops@head", 4242))
    watch.lock("watch")
    try:
        outcome = invoke(tmp_path, "pin", "i1", "--for", "1h")
        assert outcome.exit_code == 0, outcome.output
        assert "`ray-vast watch` (pid 4242 on head) holds the state" in outcome.stdout
        assert instances(tmp_path)["i1"].pinned_by is None  # not yet: the watch decides it
        mailbox = orders.FileOrders(tmp_path)
        waiting = [o for o in mailbox.waiting() if isinstance(o, orders.Order)]
        assert [o.pin_order().target for o in waiting] == ["i1"]
        assert oct(mailbox.path_of(waiting[0].id).stat().st_mode & 0o777) == "0o600"
    finally:
        watch.unlock()


def test_another_lock_gets_the_usual_lock_message(tmp_path: Path):
    make_state(tmp_path, FakeClock(NOW))
    other = FileStore(tmp_path, clock=FakeClock(NOW), identity=Identity("ops@head", 4242))
    other.lock("apply")
    try:
        outcome = invoke(tmp_path, "pin", "i1")
    finally:
        other.unlock()
    assert outcome.exit_code == 1
    assert "Error acquiring the state lock" in outcome.stderr
    assert "ray-vast state force-unlock" in outcome.stderr


def test_help_says_what_to_do_while_watch_runs():
    for command in ("pin", "unpin"):
        shown = CliRunner().invoke(app, [command, "--help"])
        assert shown.exit_code == 0
        text = " ".join(shown.stdout.split())
        assert "While `ray-vast watch` (or `up`) runs it holds the state lock" in text
        assert "the order is handed to it" in text
        assert f"ray-vast {command} 20000001" in text
