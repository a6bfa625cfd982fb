"""The tables a state keeps in a database, and how a database is brought to them.

One schema for SQLite and PostgreSQL, many workspaces (states) in one database:

- `rv_states`: one row per workspace, the snapshot as the file store writes it (`data`);
- `rv_history`: the last versions written (the file store's `state.json.backup`, deeper);
- `rv_fencing`: the workspace's fencing counter, which only grows (it outlives every lease);
- `rv_locks`: the lease, with everything the holder says about itself;
- `rv_ledger`: the ledger's lines, as the file ledger writes them;
- `rv_plans` (schema 2): the reviewed plans, by the git tree hash of the specs they planned;
- `rv_orders` (schema 3): what commands on any machine leave for the running `watch`.

`rv_meta.schema_version` says which schema a database holds. Bringing a database up to date runs
each step in its own transaction, serialised between processes (an advisory lock on PostgreSQL,
SQLite's write lock): two processes starting on an empty database must not deadlock (dstack#3219).
A database with a newer schema than this ray-vast knows is refused, never written.
"""

from __future__ import annotations

from reconciler.state.errors import StateTooNewError
from reconciler.state.sql.dialect import Connection, Dialect

SCHEMA_VERSION = 3
HISTORY_KEPT = 10
# The advisory lock that serialises schema changes on PostgreSQL.
MIGRATION_LOCK = 726563617374

_STEPS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE IF NOT EXISTS rv_states (workspace TEXT PRIMARY KEY, lineage TEXT NOT NULL,"
        " serial BIGINT NOT NULL, data TEXT NOT NULL, written_at DOUBLE PRECISION NOT NULL,"
        " written_by TEXT NOT NULL, fencing BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS rv_history (workspace TEXT NOT NULL, serial BIGINT NOT NULL,"
        " lineage TEXT NOT NULL, data TEXT NOT NULL, written_at DOUBLE PRECISION NOT NULL,"
        " PRIMARY KEY (workspace, serial))",
        "CREATE TABLE IF NOT EXISTS rv_fencing (workspace TEXT PRIMARY KEY, token BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS rv_locks (workspace TEXT PRIMARY KEY, lock_id TEXT NOT NULL,"
        " fencing BIGINT NOT NULL, info TEXT NOT NULL, expires DOUBLE PRECISION NOT NULL,"
        " session BIGINT)",
        "CREATE TABLE IF NOT EXISTS rv_ledger (id {serial_key}, workspace TEXT NOT NULL,"
        " seq BIGINT NOT NULL, line TEXT NOT NULL, UNIQUE (workspace, seq))",
    ),
    2: (
        "CREATE TABLE IF NOT EXISTS rv_plans (workspace TEXT NOT NULL, spec_tree TEXT NOT NULL,"
        " head_sha TEXT NOT NULL, status TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,"
        " created_by TEXT NOT NULL, body TEXT NOT NULL, outcome TEXT NOT NULL,"
        " PRIMARY KEY (workspace, spec_tree))",
    ),
    3: (
        "CREATE TABLE IF NOT EXISTS rv_orders (id TEXT NOT NULL, workspace TEXT NOT NULL,"
        " kind TEXT NOT NULL, body TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,"
        " by_whom TEXT NOT NULL, state TEXT NOT NULL, code BIGINT, message TEXT,"
        " PRIMARY KEY (workspace, id))",
    ),
}


def ensure(conn: Connection, dialect: Dialect) -> None:
    """Bring the database to this schema, or refuse one that is newer."""
    have = _run_step(conn, dialect, 0)
    for step in range(have + 1, SCHEMA_VERSION + 1):
        _run_step(conn, dialect, step)


def _run_step(conn: Connection, dialect: Dialect, step: int) -> int:
    """Run one step (0: the meta table only) unless another process ran it meanwhile; the
    version the database had before it."""
    conn.execute(dialect.begin)
    try:
        if dialect.name == "postgresql":
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS rv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
        )
        have = _version(conn, dialect)
        _refuse_newer(have, dialect)
        if step > 0 and have < step:
            for statement in _STEPS[step]:
                conn.execute(statement.replace("{serial_key}", dialect.serial_key))
            conn.execute(
                dialect.sql(
                    "INSERT INTO rv_meta (key, value) VALUES ('schema_version', ?)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                (str(step),),
            )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return have


def _version(conn: Connection, dialect: Dialect) -> int:
    row = conn.execute(
        dialect.sql("SELECT value FROM rv_meta WHERE key = ?"), ("schema_version",)
    ).fetchone()
    return int(row[0]) if row else 0


def _refuse_newer(have: int, dialect: Dialect) -> None:
    if have > SCHEMA_VERSION:
        raise StateTooNewError(
            f"{dialect.where} holds ray-vast state schema {have}; this ray-vast knows schema"
            f" {SCHEMA_VERSION} at most. Upgrade ray-vast to use this state; it was not changed."
        )
