"""The ledger: lines that match the schema, durable appends, torn lines, filters, no secrets."""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler.state import (
    MASK,
    LedgerEvent,
    LedgerKind,
    LedgerLineSkipped,
    LedgerQuery,
    LedgerWriter,
    ledger_path,
    read_ledger,
)
from tests.state.conftest import SECRET, RecordingClock

ROOT = Path(__file__).parents[2]
VALIDATOR = Draft202012Validator(json.loads((ROOT / "schemas" / "ledger.schema.json").read_text()))


def event(
    class_: str = "went_silent",
    *,
    cluster: str = "demo",
    instance: int | None = 31337,
    message: str = "no heartbeat for 90 s",
    **extra: object,
) -> LedgerEvent:
    return LedgerEvent(
        cluster=cluster,
        kind=LedgerKind.DETECTION,
        class_=class_,
        message=message,
        instance=instance,
        **extra,  # type: ignore[arg-type]
    )


class CountingWriter(LedgerWriter):
    """Counts the fsyncs of appended lines."""

    syncs = 0

    def _sync(self, fd: int) -> None:
        self.syncs += 1
        super()._sync(fd)


@pytest.fixture
def path(state_dir: Path) -> Path:
    return ledger_path(state_dir)


@pytest.fixture
def ledger(path: Path, clock: RecordingClock) -> Iterator[LedgerWriter]:
    with LedgerWriter.open(path, clock=clock, secrets=(SECRET,)) as writer:
        yield writer


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line]


def test_an_entry_is_one_schema_valid_line_with_every_field(
    path: Path, ledger: LedgerWriter, clock: RecordingClock
) -> None:
    entry = ledger.append(
        LedgerEvent(
            cluster="demo",
            kind=LedgerKind.OUTCOME,
            class_="provider_call",
            message="destroyed instance 31337",
            record="r-1",
            instance=31337,
            dph=-0.412,
            data={"status": 200, "attempts": [1, 2]},
        )
    )
    ledger.close()
    (line,) = lines(path)
    VALIDATOR.validate(line)
    assert line == {
        "time": clock.now(),
        "seq": 1,
        "cluster": "demo",
        "kind": "outcome",
        "class": "provider_call",
        "record": "r-1",
        "instance": 31337,
        "dph": -0.412,
        "message": "destroyed instance 31337",
        "data": {"status": 200, "attempts": [1, 2]},
    }
    assert entry.to_json() == line


def test_the_schema_rejects_lines_a_reader_could_not_use() -> None:
    Draft202012Validator.check_schema(VALIDATOR.schema)
    good = {
        "time": 1.0,
        "seq": 1,
        "cluster": "demo",
        "kind": "note",
        "class": "went_silent",
        "record": None,
        "instance": None,
        "dph": None,
        "message": "",
        "data": {},
    }
    VALIDATOR.validate(good)
    for bad in (
        {**good, "kind": "gossip"},
        {**good, "class": "Went Silent"},
        {**good, "seq": 0},
        {**good, "instance": "31337"},
        {k: v for k, v in good.items() if k != "record"},
    ):
        assert not VALIDATOR.is_valid(bad)


def test_time_comes_from_the_clock_and_seq_counts_up_across_reopening(
    path: Path, ledger: LedgerWriter, clock: RecordingClock
) -> None:
    ledger.append(event())
    clock.advance(60)
    ledger.append(event())
    ledger.close()
    with LedgerWriter.open(path, clock=clock) as again:
        again.append(event())
    found = lines(path)
    assert [line["seq"] for line in found] == [1, 2, 3]
    assert [line["time"] for line in found] == [clock.now() - 60, clock.now(), clock.now()]
    for line in found:
        VALIDATOR.validate(line)


def test_the_file_is_0600_in_a_0700_directory(path: Path, ledger: LedgerWriter) -> None:
    ledger.append(event())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_loose_existing_ledger_is_tightened(path: Path, clock: RecordingClock) -> None:
    path.parent.mkdir(mode=0o700)
    path.write_text("")
    path.chmod(0o644)
    LedgerWriter.open(path, clock=clock).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_each_append_syncs_and_a_batch_syncs_once(path: Path, clock: RecordingClock) -> None:
    with CountingWriter.open(path, clock=clock) as writer:
        writer.append(event())
        writer.append(event())
        assert writer.syncs == 2
        written = writer.append_all([event("a"), event("b"), event("c")])
        assert writer.syncs == 3
        assert writer.append_all([]) == []
        assert writer.syncs == 3
    assert [entry.seq for entry in written] == [3, 4, 5]
    assert [line["class"] for line in lines(path)] == ["went_silent"] * 2 + ["a", "b", "c"]


def test_appends_go_to_the_end_even_from_two_writers(path: Path, clock: RecordingClock) -> None:
    first = LedgerWriter.open(path, clock=clock)
    second = LedgerWriter.open(path, clock=clock)
    first.append(event("one"))
    second.append(event("two"))
    first.append(event("three"))
    first.close()
    second.close()
    assert [line["class"] for line in lines(path)] == ["one", "two", "three"]


def test_opening_never_truncates_what_is_there(path: Path, ledger: LedgerWriter) -> None:
    ledger.append(event())
    ledger.close()
    before = path.read_bytes()
    with LedgerWriter.open(path, clock=RecordingClock()) as again:
        again.append(event())
    assert path.read_bytes().startswith(before)


def test_a_torn_last_line_is_skipped_with_a_warning(path: Path, ledger: LedgerWriter) -> None:
    ledger.append(event("first"))
    ledger.append(event("second"))
    ledger.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"time": 1790000000.0, "seq": 3, "clus')
    with pytest.warns(LedgerLineSkipped, match=r"ledger.jsonl:3"):
        read = list(read_ledger(path))
    assert [entry.class_ for entry in read] == ["first", "second"]


def test_appending_after_a_torn_line_keeps_the_fragment_and_continues_the_seq(
    path: Path, ledger: LedgerWriter, clock: RecordingClock
) -> None:
    ledger.append(event("first"))
    ledger.close()
    torn = path.read_bytes() + b'{"time": 1790000000.0, "seq": 2, "clus'
    path.write_bytes(torn)
    with LedgerWriter.open(path, clock=clock) as again:
        entry = again.append(event("after_crash"))
    assert entry.seq == 2
    assert path.read_bytes().startswith(torn)  # never rewritten, only appended to
    with pytest.warns(LedgerLineSkipped, match=r"ledger.jsonl:2"):
        read = list(read_ledger(path))
    assert [(e.seq, e.class_) for e in read] == [(1, "first"), (2, "after_crash")]


def test_the_seq_is_found_behind_a_long_tail_of_garbage(path: Path, clock: RecordingClock) -> None:
    with LedgerWriter.open(path, clock=clock) as writer:
        writer.append_all([event() for _ in range(3)])
    with path.open("ab") as handle:
        handle.write(b"x" * 200_000 + b"\n")  # longer than one backwards read block
    with LedgerWriter.open(path, clock=clock) as writer:
        assert writer.append(event()).seq == 4


def test_a_missing_ledger_reads_as_empty(path: Path) -> None:
    assert list(read_ledger(path)) == []


def test_filters_select_by_cluster_class_instance_and_time(
    path: Path, ledger: LedgerWriter, clock: RecordingClock
) -> None:
    ledger.append(event("went_silent", cluster="a", instance=1))
    clock.advance(10)
    ledger.append(event("enrollment_timeout", cluster="a", instance=2))
    clock.advance(10)
    ledger.append(event("went_silent", cluster="b", instance=None))
    ledger.close()
    start = clock.now() - 20

    def seqs(query: LedgerQuery) -> list[int]:
        return [entry.seq for entry in read_ledger(path, query)]

    assert seqs(LedgerQuery()) == [1, 2, 3]
    assert seqs(LedgerQuery(cluster="a")) == [1, 2]
    assert seqs(LedgerQuery(class_="went_silent")) == [1, 3]
    assert seqs(LedgerQuery(instance=2)) == [2]
    assert seqs(LedgerQuery(since=start + 10)) == [2, 3]
    assert seqs(LedgerQuery(cluster="a", class_="went_silent", since=start)) == [1]
    assert seqs(LedgerQuery(cluster="c")) == []


def test_the_reader_returns_what_the_writer_wrote(path: Path, ledger: LedgerWriter) -> None:
    written = ledger.append_all(
        [event(data={"nested": {"list": [1, "two", None, True]}}, dph=0.5, record="r-9")]
    )
    assert list(read_ledger(path)) == written


def test_a_secret_never_reaches_the_file(path: Path, ledger: LedgerWriter) -> None:
    ledger.append(
        event(
            message=f"create failed: 401 for api_key={SECRET}",
            record=f"r-{SECRET}",
            data={"request": {"headers": {"Authorization": f"Bearer {SECRET}"}}, SECRET: [SECRET]},
        )
    )
    ledger.append_all([event(message=SECRET)])
    ledger.close()
    text = path.read_text()
    assert SECRET not in text
    first, second = read_ledger(path)
    assert first.message == f"create failed: 401 for api_key={MASK}"
    assert first.record == f"r-{MASK}"
    assert first.data == {"request": {"headers": {"Authorization": f"Bearer {MASK}"}}, MASK: [MASK]}
    assert second.message == MASK


@pytest.mark.parametrize(
    "bad",
    [
        event("Went Silent"),
        event(cluster=""),
        event(dph=math.inf),
        event(data={"when": object()}),
        event(data={1: "int key"}),
        event(instance="31337"),  # type: ignore[arg-type]
        event(dph="0.5"),
        event(record=7),
    ],
    ids=["class", "cluster", "dph", "data-object", "data-key", "instance", "dph-str", "record"],
)
def test_an_invalid_event_is_refused_and_nothing_of_its_batch_is_written(
    path: Path, ledger: LedgerWriter, bad: LedgerEvent
) -> None:
    ledger.append(event())
    with pytest.raises(ValueError):
        ledger.append_all([event("fine"), bad])
    assert ledger.append(event()).seq == 2
    ledger.close()
    assert [line["seq"] for line in lines(path)] == [1, 2]


def test_a_closed_writer_refuses_to_append(ledger: LedgerWriter) -> None:
    ledger.close()
    ledger.close()  # closing twice is harmless
    with pytest.raises(ValueError, match="closed"):
        ledger.append(event())


def test_lines_are_single_lines_whatever_the_message(path: Path, ledger: LedgerWriter) -> None:
    ledger.append(event(message="line one\nline two\r\n\u2028 and unicode: \u00e9\u4e2d"))
    ledger.close()
    raw = path.read_bytes()
    assert raw.count(b"\n") == 1
    (entry,) = read_ledger(path)
    assert entry.message == "line one\nline two\r\n\u2028 and unicode: \u00e9\u4e2d"
