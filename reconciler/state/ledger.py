"""The ledger: an append-only record of every detection, decision, provider call and outcome.

`ledger.jsonl` lives beside the state. Each line is one JSON object (`schemas/ledger.schema.json`):
`time` (from the injected clock), `seq` (one more than the line before it in this file), `cluster`,
`kind`, `class` (a ledger class such as `enrollment_timeout`), `record`, `instance`, `dph`,
`message` and free `data`. It is what a person reads to learn why a machine was rented or ended and
what it cost, so it must survive the crashes it is there to explain:

- the file is opened O_APPEND and is never rewritten or truncated; it is 0600 in a 0700 directory;
- every append is one `write` of whole lines followed by `fsync`; `append_all` writes a batch with
  one fsync, for a tick that records many things at once;
- a crash mid-append can leave a torn last line. The writer, on opening, ends such a fragment with
  a newline so the next line does not fuse with it, and the reader skips any line it cannot parse
  with a warning instead of failing: one lost line must not hide the rest of the history;
- every entry passes through `redact` with the secrets the caller knows before it is encoded.

Only the holder of the state lock should write the ledger; `seq` is continued from the last line
when the writer opens, so two writers at once would repeat numbers.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Protocol, Self, TypeVar

from reconciler.clock import Clock
from reconciler.state.errors import LocalFileError
from reconciler.state.files import FILE_MODE, ensure_private_dir, write_all
from reconciler.state.jsonvalue import plain_json
from reconciler.state.redact import normalise_secrets, redact

LEDGER_FILE = "ledger.jsonl"
CLASS_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
_TAIL_BLOCK = 65536

T = TypeVar("T")


class LedgerKind(StrEnum):
    DETECTION = "detection"  # a net or a check noticed something
    DECISION = "decision"  # the planner chose to act (or not)
    CALL = "call"  # a provider call is about to be made
    OUTCOME = "outcome"  # what the call, or the action, came to
    ALERT = "alert"  # something a person should look at
    REPORT = "report"  # a periodic summary (cost, status)
    NOTE = "note"  # anything else worth keeping


class LedgerLineSkipped(UserWarning):
    """A ledger line that could not be read (a torn write) was skipped."""


def ledger_path(state_dir: Path) -> Path:
    return state_dir / LEDGER_FILE


@dataclass(frozen=True)
class LedgerEvent:
    """What a caller records; the writer adds `time` and `seq`."""

    cluster: str
    kind: LedgerKind
    class_: str  # `class` in the file
    message: str
    record: str | None = None
    instance: int | None = None  # vast instance id
    dph: float | None = None  # the $/h this adds (positive) or removes (negative)
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LedgerEntry:
    """One line of the ledger."""

    time: float
    seq: int
    cluster: str
    kind: LedgerKind
    class_: str
    message: str
    record: str | None
    instance: int | None
    dph: float | None
    data: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "seq": self.seq,
            "cluster": self.cluster,
            "kind": str(self.kind),
            "class": self.class_,
            "record": self.record,
            "instance": self.instance,
            "dph": self.dph,
            "message": self.message,
            "data": dict(self.data),
        }

    @classmethod
    def from_json(cls, doc: object) -> LedgerEntry:
        """Parse and check one line; `ValueError` says what is wrong with it."""
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        entry = cls(
            time=_number(doc, "time"),
            seq=_integer(doc, "seq"),
            cluster=_string(doc, "cluster"),
            kind=LedgerKind(_string(doc, "kind")),
            class_=_string(doc, "class"),
            message=_string(doc, "message"),
            record=_optional(doc, "record", _string),
            instance=_optional(doc, "instance", _integer),
            dph=_optional(doc, "dph", _number),
            data=_object(doc, "data"),
        )
        entry.check()
        return entry

    def check(self) -> None:
        """The schema's rules, checked before a line is written (callers are not type-checked)."""
        _expect(self.cluster, str, "cluster")
        _expect(self.class_, str, "class")
        _expect(self.message, str, "message")
        _expect(self.record, str | None, "record")
        _expect(self.instance, int | None, "instance")
        _expect(self.dph, float | None, "dph")
        if not self.cluster:
            raise ValueError("`cluster` is empty")
        if not CLASS_PATTERN.match(self.class_):
            raise ValueError(f"`class` {self.class_!r} is not lowercase_with_underscores")
        if self.seq < 1:
            raise ValueError(f"`seq` {self.seq} is below 1")
        if not math.isfinite(self.time) or (self.dph is not None and not math.isfinite(self.dph)):
            raise ValueError("`time` and `dph` must be finite")


def _as_float(value: float | None) -> float | None:
    """An integer $/h becomes a float; anything else is left for `check` to judge."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _expect(value: object, kind: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"`{name}` is {type(value).__name__}, not {kind}")


def _string(doc: dict[str, Any], name: str) -> str:
    value = doc.get(name)
    if not isinstance(value, str):
        raise ValueError(f"`{name}` missing or not a string")
    return value


def _integer(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"`{name}` missing or not an integer")
    return value


def _number(doc: dict[str, Any], name: str) -> float:
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"`{name}` missing or not a number")
    return float(value)


def _object(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name)
    if not isinstance(value, dict):
        raise ValueError(f"`{name}` missing or not an object")
    return value


def _optional(
    doc: dict[str, Any], name: str, parse: Callable[[dict[str, Any], str], T]
) -> T | None:
    """A field that must be present but may be null."""
    if name not in doc:
        raise ValueError(f"`{name}` missing")
    return None if doc[name] is None else parse(doc, name)


def encode_line(entry: LedgerEntry) -> bytes:
    return json.dumps(entry.to_json(), ensure_ascii=False, allow_nan=False).encode() + b"\n"


def _seq_of(line: bytes) -> int | None:
    try:
        doc = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    seq = doc.get("seq") if isinstance(doc, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def last_seq(fd: int, size: int) -> int:
    """The `seq` of the last readable line, reading backwards from the end; 0 if there is none."""
    end, carry = size, b""
    while end > 0:
        start = max(0, end - _TAIL_BLOCK)
        lines = (os.pread(fd, end - start, start) + carry).split(b"\n")
        carry = lines.pop(0) if start > 0 else b""
        for line in reversed(lines):
            seq = _seq_of(line)
            if seq is not None:
                return seq
        end = start
    return 0


def stamp(event: LedgerEvent, seq: int, clock: Clock, secrets: tuple[str, ...]) -> LedgerEntry:
    """The entry for `event`: timed, numbered, secrets masked, and checked before writing (one
    rule for the file ledger and a database's)."""
    entry = LedgerEntry(
        time=clock.now(),
        seq=seq,
        cluster=redact(event.cluster, secrets),
        kind=LedgerKind(event.kind),
        class_=event.class_,
        message=redact(event.message, secrets),
        record=redact(event.record, secrets),
        instance=event.instance,
        dph=_as_float(event.dph),
        data=plain_json(redact(event.data, secrets), "data"),
    )
    entry.check()
    return entry


class LedgerSink(Protocol):
    """Anything that takes ledger events (the writer, the journal, the head's and the applier's
    books): one verb, `append(LedgerEvent(...))`, everywhere a line is written."""

    def append(self, event: LedgerEvent) -> object: ...


class Ledger(LedgerSink, Protocol):
    """A ledger a command opens: appends, and the entries of another moved in whole (`state
    migrate`): the file's `LedgerWriter`, or a database's `SqlLedger`."""

    def import_entries(self, entries: Iterable[LedgerEntry]) -> int: ...


class LedgerWriter:
    """Appends entries to one ledger file. Open with `LedgerWriter.open`; close when done."""

    def __init__(self, path: Path, fd: int, *, clock: Clock, secrets: tuple[str, ...]) -> None:
        self.path = path
        self._fd: int | None = fd
        self._clock = clock
        self._secrets = secrets
        self._seq = self._recover(fd)
        self._appending = threading.Lock()

    @classmethod
    def open(cls, path: Path, *, clock: Clock, secrets: Iterable[str] = ()) -> Self:
        """Open (creating it 0600, in a 0700 directory) the ledger at `path` for appending."""
        try:
            ensure_private_dir(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise LocalFileError(exc, state_dir=path.parent, path=path) from exc
        try:
            if os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, FILE_MODE)
            return cls(path, fd, clock=clock, secrets=normalise_secrets(secrets))
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _recover(fd: int) -> int:
        """End a torn last line with a newline, and return the last `seq` in the file."""
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            write_all(fd, b"\n")
            os.fsync(fd)
        return last_seq(fd, size)

    def _sync(self, fd: int) -> None:
        """Make appended lines durable; a hook so tests can count syncs."""
        os.fsync(fd)

    def append(self, event: LedgerEvent) -> LedgerEntry:
        """Append one entry durably (flush + fsync) and return it as written."""
        (entry,) = self.append_all([event])
        return entry

    def append_all(self, events: Iterable[LedgerEvent]) -> list[LedgerEntry]:
        """Append several entries with a single write and a single fsync."""
        with self._appending:  # the applier's threads and the head's handlers share one writer
            fd = self._require_open()
            entries: list[LedgerEntry] = []
            for event in events:
                entries.append(
                    stamp(event, self._seq + len(entries) + 1, self._clock, self._secrets)
                )
            if not entries:
                return entries
            try:
                write_all(fd, b"".join(encode_line(e) for e in entries))
                self._sync(fd)
            except BaseException:
                self._seq = self._recover(fd)  # a partial write: mend it and learn where we are
                raise
            self._seq = entries[-1].seq
            return entries

    def import_entries(self, entries: Iterable[LedgerEntry]) -> int:
        """Write entries as they are (their time and seq kept) into this empty ledger: `state
        migrate`. A ledger that holds a line refuses."""
        with self._appending:
            fd = self._require_open()
            if self._seq or os.fstat(fd).st_size:
                raise ValueError(
                    f"{self.path} is not empty: a ledger is moved only into an empty one"
                )
            lines = [encode_line(e) for e in entries]
            write_all(fd, b"".join(lines))
            self._sync(fd)
            self._seq = self._recover(fd)
            return len(lines)

    def _require_open(self) -> int:
        if self._fd is None:
            raise ValueError(f"the ledger writer for {self.path} is closed")
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True)
class LedgerQuery:
    """Which entries to read; a field left None does not filter."""

    cluster: str | None = None
    class_: str | None = None
    instance: int | None = None
    since: float | None = None  # entries at or after this time

    def matches(self, entry: LedgerEntry) -> bool:
        return (
            (self.cluster is None or entry.cluster == self.cluster)
            and (self.class_ is None or entry.class_ == self.class_)
            and (self.instance is None or entry.instance == self.instance)
            and (self.since is None or entry.time >= self.since)
        )


def _lines(handle: BinaryIO, path: Path) -> Iterator[bytes]:
    try:
        yield from handle
    except OSError as exc:
        raise LocalFileError(exc, state_dir=path.parent, path=path) from exc


def read_ledger(path: Path, query: LedgerQuery | None = None) -> Iterator[LedgerEntry]:
    """The entries of the ledger at `path` that match `query`, oldest first.

    A missing file is an empty ledger. A line that does not parse (a torn append) is skipped with a
    `LedgerLineSkipped` warning naming the file and line.
    """
    query = query or LedgerQuery()
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LocalFileError(exc, state_dir=path.parent, path=path) from exc
    with handle:
        yield from parse_lines(_lines(handle, path), str(path), query)


def parse_lines(
    lines: Iterable[bytes], where: str, query: LedgerQuery | None = None
) -> Iterator[LedgerEntry]:
    """The entries of ledger lines that match `query`; a line that does not parse (a torn
    append) is skipped with a `LedgerLineSkipped` warning naming where it is."""
    query = query or LedgerQuery()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = LedgerEntry.from_json(json.loads(line))
        except (UnicodeDecodeError, ValueError) as exc:
            warnings.warn(
                f"{where}:{number}: skipped an unreadable ledger line ({exc}); a crash"
                " during an append leaves one",
                LedgerLineSkipped,
                stacklevel=3,
            )
            continue
        if query.matches(entry):
            yield entry
