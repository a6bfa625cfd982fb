"""The dependencies a command runs with, built once by the CLI and passed down.

Everything that touches the outside world (the clock, the environment, the state directory, the
vast client, the output streams, the terminal) is gathered here, so tests can hand a command a
fake clock, a served vastsim and a temporary state directory and nothing else changes.

`Deps` is built once, whole (a frozen dataclass): how it makes its state store and its vast
clients are constructor arguments like the rest, the real ones by default, so a test or a
benchmark passes its own instead of patching this module; and `stop_requested` is the command's
`Interrupts`, handed in at construction (`cli/context.deps`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

from reconciler.applying.journal import Journal, records_of
from reconciler.applying.provider import Provider
from reconciler.clock import Clock
from reconciler.errors import InputError
from reconciler.model.codec import encode
from reconciler.model.records import Records
from reconciler.model.spec import ClusterSpec
from reconciler.state import backend
from reconciler.state.backend import StateURL
from reconciler.state.filestore import FileStore
from reconciler.state.ledger import (
    Ledger,
    LedgerEntry,
    LedgerQuery,
    LedgerWriter,
    ledger_path,
    read_ledger,
)
from reconciler.state.snapshot import StateSnapshot
from reconciler.state.sql.store import SqlStore
from reconciler.state.store import StateStore
from reconciler.vast.config import ClientSettings
from reconciler.vast.factory import KEY_VARIABLE, client_from_settings

STATE_DIR_VARIABLE = "RAY_VAST_STATE_DIR"
# `off` turns the client's per-endpoint pacing off: for a simulator that does not rate-limit.
PACING_VARIABLE = "RAY_VAST_PACING"
DEFAULT_STATE_DIR = ".ray-vast"

ProviderFactory = Callable[[str | None], Provider]


class StoreFactory(Protocol):
    """Makes the state store of a state directory (`FileStore`, or a test's)."""

    def __call__(
        self, state_dir: Path, *, clock: Clock, secrets: tuple[str, ...]
    ) -> StateStore: ...


class ClientFactory(Protocol):
    """Opens a vast client for a spec's provider URL (`vast_client`, or a test's)."""

    def __call__(
        self, *, env: Mapping[str, str], spec_url: str | None, clock: Clock
    ) -> Provider: ...


def vast_client(*, env: Mapping[str, str], spec_url: str | None, clock: Clock) -> Provider:
    """The real vast client, paced unless RAY_VAST_PACING is `off`."""
    settings = ClientSettings(pacing=env.get(PACING_VARIABLE, "on") != "off")
    return client_from_settings(env=env, spec_url=spec_url, clock=clock, settings=settings)


def state_dir_from(option: Path | None, env: Mapping[str, str], cwd: Path) -> Path:
    """`--state-dir`, else RAY_VAST_STATE_DIR, else `.ray-vast/` in the working directory."""
    if option is not None:
        return option
    if env.get(STATE_DIR_VARIABLE):
        return Path(env[STATE_DIR_VARIABLE])
    return cwd / DEFAULT_STATE_DIR


def never() -> bool:
    """A stop that is never requested: the commands that do not install `Interrupts`."""
    return False


@dataclass(frozen=True)
class Deps:
    clock: Clock
    env: Mapping[str, str]
    state_dir: Path
    out: TextIO
    err: TextIO
    interactive: bool
    ask: Callable[[str], str]
    # One provider for every URL, not closed by `close` (a test's fake, a benchmark's client);
    # None: `client_factory` opens one per call.
    provider_factory: ProviderFactory | None = None
    lock_timeout: float = 0.0
    # Whether a first SIGINT/SIGTERM asked the command to stop (the CLI's `Interrupts.requested`).
    stop_requested: Callable[[], bool] = never
    store_factory: StoreFactory = FileStore
    client_factory: ClientFactory = vast_client
    # Where the state lives when not in `state_dir`'s files (`--state URL`, RAY_VAST_STATE_URL):
    # a database; `state_dir` still holds what is this machine's own (PKI, embedded processes).
    state_url: StateURL | None = None
    # The vast clients this command opened (their connection pools), closed by `close`.
    opened: list[Provider] = field(default_factory=list)

    def secrets(self) -> tuple[str, ...]:
        key = self.env.get(KEY_VARIABLE, "").strip()
        url = tuple(self.state_url.secrets()) if self.state_url is not None else ()
        return ((key,) if key else ()) + url

    @property
    def in_database(self) -> bool:
        return self.state_url is not None and self.state_url.kind != "file"

    def store(self) -> StateStore:
        if self.state_url is not None and self.in_database:
            return self.store_at(self.state_url)
        return self.store_factory(self.state_dir, clock=self.clock, secrets=self.secrets())

    def store_at(self, url: StateURL) -> StateStore:
        """The store a URL names (`state migrate`'s two ends; `store()` for this command's)."""
        if url.kind == "file":
            assert url.path is not None
            return self.store_factory(url.path, clock=self.clock, secrets=self.secrets())
        # open_store adds the URL's own password to what is redacted
        return backend.open_store(url, clock=self.clock, secrets=self.secrets(), env=self.env)

    @contextlib.contextmanager
    def ledger(self, store: StateStore) -> Iterator[Ledger]:
        """The ledger beside `store`'s state: its database's, or the `ledger.jsonl` of its
        directory."""
        if isinstance(store, SqlStore):
            yield backend.ledger_of(store, clock=self.clock, secrets=self.secrets())
            return
        with LedgerWriter.open(
            ledger_path(_directory(store, self.state_dir)),
            clock=self.clock,
            secrets=self.secrets(),
        ) as writer:
            yield writer

    def entries(self, store: StateStore, query: LedgerQuery | None = None) -> Iterator[LedgerEntry]:
        """The entries of the ledger beside `store`'s state that match `query`, oldest first."""
        if isinstance(store, SqlStore):
            yield from backend.ledger_of(store, clock=self.clock, secrets=()).entries(query)
            return
        yield from read_ledger(ledger_path(_directory(store, self.state_dir)), query)

    def ledger_entries(self, query: LedgerQuery | None = None) -> Iterator[LedgerEntry]:
        """This command's ledger entries that match `query`, wherever the state lives."""
        store = self.store()
        try:
            yield from self.entries(store, query)
        finally:
            closed(store, unlock=False)

    def provider(self, specs: list[ClusterSpec] | None = None) -> Provider:
        url = _one_url(specs or [])
        if self.provider_factory is not None:
            return self.provider_factory(url)
        client = self.client_factory(env=self.env, spec_url=url, clock=self.clock)
        self.opened.append(client)
        return client

    def close(self) -> None:
        """Close the vast clients this command opened (the CLI calls it when a command ends)."""
        while self.opened:
            closing = getattr(self.opened.pop(), "close", None)
            if callable(closing):
                closing()

    @contextlib.contextmanager
    def journal(self, operation: str) -> Iterator[Journal]:
        """The state, locked for `operation`, with the ledger open; created empty if absent."""
        store = self.store()
        try:
            store.lock(operation, timeout_seconds=self.lock_timeout)
        except BaseException:
            closed(store, unlock=False)
            raise
        try:
            snapshot = store.read()
            if snapshot is None:
                snapshot = store.write(encode(Records()), based_on=None)
            with self.ledger(store) as ledger:
                if isinstance(store, SqlStore) and store.taken_over is not None:
                    ledger.append(backend.taken_over(store, store.taken_over))
                journal = Journal(store, ledger, snapshot)
                yield journal
                journal.flush()  # the clocks heartbeats left unwritten (a crash loses seconds)
        finally:
            closed(store)

    @contextlib.contextmanager
    def reading(self) -> Iterator[StateSnapshot]:
        """The state for a read-only operation (`plan`): no lock when it exists, since writes are
        atomic renames, so `plan` runs beside a `watch` that holds the lock; when there is no
        state yet it is created (under the lock) to fix the lineage the labels carry."""
        snapshot = self.read_snapshot()
        if snapshot is None:
            with self.journal("plan") as journal:
                snapshot = journal.snapshot
        yield snapshot

    def read_snapshot(self) -> StateSnapshot | None:
        """The state as last saved, read without the lock (the store closed after)."""
        store = self.store()
        try:
            return store.read()
        finally:
            closed(store, unlock=False)

    def read_records(self) -> tuple[Records, str | None, int]:
        """The records as last saved, without the lock (for `status`)."""
        snapshot = self.read_snapshot()
        if snapshot is None:
            return Records(), None, 0
        return records_of(snapshot), snapshot.lineage, snapshot.serial


def closed(store: StateStore, *, unlock: bool = True) -> None:
    """Give the lock back (`unlock`), and a database store's connection with it."""
    try:
        if unlock:
            store.unlock()
    finally:
        if isinstance(store, SqlStore):
            store.close()


def _directory(store: StateStore, default: Path) -> Path:
    """The directory a file store's ledger lives in (a test's store: the command's)."""
    return store.state_dir if isinstance(store, FileStore) else default


def _one_url(specs: list[ClusterSpec]) -> str | None:
    urls = {s.provider.url for s in specs}
    if len(urls) > 1:
        raise InputError(
            "the specs name more than one provider URL; run ray-vast on one directory per provider"
        )
    return next(iter(urls), None)
