"""The state in a database: SQLite (one machine) or PostgreSQL (a team's), many workspaces each.

`store.SqlStore` is a `StateStore` whose lock is a lease (`lease.py`) and whose every write is a
compare-and-swap; `link.py` keeps its connection, `schema.py` its tables, `dialect.py` what differs
between the two databases. psycopg is imported only when a state lives in PostgreSQL.

May import the rest of `reconciler.state`, `clock` and the error root; nothing above them.
"""
