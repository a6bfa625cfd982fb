"""Where a state lives, chosen by URL (`--state URL`, `RAY_VAST_STATE_URL`).

- `file:///abs/dir` (or a plain path): the file store, today's `.ray-vast/` directory;
- `sqlite:///abs/state.db` (`sqlite://rel/state.db` relative): one machine, one file;
- `postgresql://user@host:port/db` (`postgres://` too): a team's, reached from any runner.

`?workspace=NAME` picks one of several states in one database (default `default`); the rest of
the query goes to libpq as it is (`sslmode=require`, say). A password in the URL is a secret like
the vast key: it is masked wherever the URL is said (`where`), and redacted from what is saved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

from reconciler.clock import Clock
from reconciler.errors import InputError
from reconciler.state.ledger import LedgerEvent, LedgerKind
from reconciler.state.lock import Identity
from reconciler.state.lockinfo import LockInfo
from reconciler.state.sql.dialect import Dialect, Postgres, Sqlite
from reconciler.state.sql.lease import LEASE_SECONDS
from reconciler.state.sql.ledger import SqlLedger
from reconciler.state.sql.store import DEFAULT_WORKSPACE, SqlStore

URL_VARIABLE = "RAY_VAST_STATE_URL"
# A database lease's length in seconds (60 by default): shorter, a dead holder is taken over
# sooner and a live one renews more often.
LEASE_VARIABLE = "RAY_VAST_LEASE_SECONDS"
WORKSPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class StateURL:
    """A parsed state URL: its kind, what to open, and its secret (a password), if any."""

    kind: str  # "file", "sqlite" or "postgresql"
    where: str  # the URL with its password masked: what messages say
    path: Path | None = None  # file and sqlite
    conninfo: str = ""  # postgresql, without our own query parameters
    workspace: str = DEFAULT_WORKSPACE
    password: str = ""

    def dialect(self) -> Dialect:
        if self.kind == "sqlite":
            assert self.path is not None
            return Sqlite(self.path)
        if self.kind == "postgresql":
            return Postgres(self.conninfo, self.where)
        raise InputError(f"{self.where} is a directory of files, not a database")

    def secrets(self) -> Iterable[str]:
        return (self.password,) if self.password else ()


def parse(text: str, *, cwd: Path) -> StateURL:
    """A state URL, or `InputError` that says what is wrong with it."""
    scheme, _, rest = text.partition("://")
    if not rest:
        return StateURL("file", str(cwd / text), path=cwd / text)
    scheme = scheme.lower()
    if scheme == "file":
        path = _path(rest, cwd)
        return StateURL("file", f"file://{path}", path=path)
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    workspace = _workspace(dict(query).get("workspace", DEFAULT_WORKSPACE), text)
    others = [(k, v) for k, v in query if k != "workspace"]
    if scheme == "sqlite":
        path = _path(rest.partition("?")[0], cwd)
        return StateURL("sqlite", f"sqlite://{path}", path=path, workspace=workspace)
    if scheme in ("postgresql", "postgres"):
        return _postgres(parts, others, workspace)
    raise InputError(
        f"state URL {_masked(parts)!r}: the scheme {scheme!r} is not one of file, sqlite or"
        " postgresql"
    )


def _path(rest: str, cwd: Path) -> Path:
    """`///abs` after the scheme is absolute, `//rel` relative to the working directory."""
    return Path(rest) if rest.startswith("/") else cwd / rest


def _workspace(name: str, text: str) -> str:
    if not WORKSPACE.match(name):
        raise InputError(
            f"state URL: workspace {name!r} must be 1-64 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    return name


def _postgres(url: SplitResult, others: list[tuple[str, str]], workspace: str) -> StateURL:
    if not url.hostname and "host" not in dict(others):
        raise InputError(f"state URL {_masked(url)!r} names no host")
    conninfo = urlunsplit(("postgresql", url.netloc, url.path, urlencode(others), ""))
    where = _masked(url, others, workspace)
    password = url.password or ""
    return StateURL("postgresql", where, conninfo=conninfo, workspace=workspace, password=password)


def _masked(
    url: SplitResult, others: list[tuple[str, str]] | None = None, workspace: str | None = None
) -> str:
    netloc = url.netloc
    if url.password:
        netloc = f"{url.username or ''}:***@{netloc.rpartition('@')[2]}"
    query = list(others or [])
    if workspace is not None and workspace != DEFAULT_WORKSPACE:
        query.append(("workspace", workspace))
    return urlunsplit((url.scheme, netloc, url.path, urlencode(query), ""))


def ci_url(env: Mapping[str, str]) -> str:
    """The CI run this process belongs to, when GitHub Actions' variables say it."""
    parts = [env.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")]
    return f"{parts[0]}/{parts[1]}/actions/runs/{parts[2]}" if all(parts) else ""


def open_store(
    url: StateURL,
    *,
    clock: Clock,
    secrets: Iterable[str],
    env: Mapping[str, str],
    identity: Identity | None = None,
) -> SqlStore:
    """The database store a URL names (a file URL is the caller's: it has its own factory)."""
    return SqlStore(
        url.dialect(),
        clock=clock,
        workspace=url.workspace,
        secrets=(*secrets, *url.secrets()),
        identity=identity,
        ci_url=ci_url(env),
        lease_seconds=lease_seconds(env),
    )


def lease_seconds(env: Mapping[str, str]) -> float:
    text = env.get(LEASE_VARIABLE, "")
    if not text:
        return LEASE_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 1.0 <= seconds <= 3600.0:
        raise InputError(f"{LEASE_VARIABLE}={text!r}: give seconds between 1 and 3600")
    return seconds


def ledger_of(store: SqlStore, *, clock: Clock, secrets: Iterable[str]) -> SqlLedger:
    """The ledger beside a database store's state (on the same connection)."""
    return SqlLedger(store.link, clock=clock, secrets=secrets)


def taken_over(store: SqlStore, dead: LockInfo) -> LedgerEvent:
    """The ledger's line for a lease taken over from a holder proven gone (the file store
    writes its own)."""
    held = store.held
    message = (
        f"took over the state lease of `{dead.operation}` (pid {dead.pid} on {dead.host}, fencing"
        f" {dead.fencing}): its holder is gone and its lease lapsed; going on from the last saved"
        " state"
    )
    data = {"dead": dead.to_json(), "fencing": held.fencing if held else None}
    return LedgerEvent("*", LedgerKind.NOTE, "lock_taken_over", message, data=data)
