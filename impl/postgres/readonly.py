"""Open a PostgreSQL ql3 database read-only and read it back as a snapshot (`qlwf audit`).

The session starts with `default_transaction_read_only` on and the read runs in one `REPEATABLE READ READ
ONLY` transaction: the server refuses any write, and every table is read from one consistent view of a live
database. The transaction is rolled back, never committed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from qlwf.impl.readonly import EXTRA_VALUES, GENERIC_TABLES, MIRRORS, OTHER_RUNS, UnreadableDatabase, quote_identifier
from qlwf.model.records import Record
from qlwf.model.tables import TRIGGER_TYPE

from .codec import ALL_TABLES, ATTEMPTS, LEASES, RUNS, RUNS_TABLE, STEP_RUNS_TABLE
from .session import PgSession
from .snapshot import read_snapshot, workflow_rows

_CONNECT_TIMEOUT_S = 10


def open_read_only(dsn: str) -> psycopg.Connection[Any]:
    """A connection whose transactions are READ ONLY (its first statement opens one)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as e:
        raise UnreadableDatabase(f"malformed DSN: {str(e).strip()}") from e
    try:
        conn = psycopg.connect(dsn, autocommit=False, connect_timeout=_CONNECT_TIMEOUT_S,
                               options="-c default_transaction_read_only=on")
    except psycopg.Error as e:
        raise UnreadableDatabase(f"cannot connect: {str(e).strip().splitlines()[0]}") from e
    conn.read_only = True
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return conn


def check_layout(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT array_agg(t) FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NULL",
                       (list(ALL_TABLES),)).fetchone()
    missing = row[0] if row else None
    if missing:
        raise UnreadableDatabase(f"not a qlwf/ql3 PostgreSQL schema (missing tables {', '.join(sorted(missing))})")


def transaction_read_only(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT current_setting('transaction_read_only')").fetchone()
    return row is not None and row[0] == "on"


_TABLES = {"runs": RUNS, "attempts": ATTEMPTS, "leases": LEASES}


def extra_column_values(conn: psycopg.Connection[Any]) -> list[Record]:
    """Every non-NULL value of a workflow Run's row in a column outside the v1 subset (storage.md §9)."""
    out: list[Record] = []
    for kind, key, run in GENERIC_TABLES:
        table = _TABLES[kind]
        schema, name = table.name.split(".")
        present = [c for (c,) in conn.execute("SELECT column_name FROM information_schema.columns WHERE "
                                               "table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                                               (schema, name))]
        for column in (c for c in present if c not in table.columns):
            query = workflow_rows(f'SELECT {run}, {key} FROM {table.name} ORDER BY {key} COLLATE "C"',
                                  kind == "runs", also=f"{quote_identifier(column).replace('%', '%%')} IS NOT NULL")
            out += [{"runId": r, "kind": kind, "key": k, "column": column}
                    for r, k in conn.execute(query, (TRIGGER_TYPE,))]
    return out


def load(dsn: str) -> dict[str, list[Record]]:
    conn = open_read_only(dsn)
    try:
        check_layout(conn)
        if not transaction_read_only(conn):  # a pooler or server setting that overrides the session's
            raise UnreadableDatabase("the server did not open a READ ONLY transaction")
        # inside the REPEATABLE READ READ ONLY transaction opened above
        snap = read_snapshot(PgSession(conn), workflow_only=True)
        snap[MIRRORS] = [{"id": i, "runId": r, "json": j} for i, r, j in conn.execute(
            workflow_rows(f'SELECT id, run_id, step_run_json FROM {STEP_RUNS_TABLE} ORDER BY id COLLATE "C"'),
            (TRIGGER_TYPE,))]
        row = conn.execute(f"SELECT count(*) FROM {RUNS_TABLE} WHERE trigger_type IS DISTINCT FROM %s",
                           (TRIGGER_TYPE,)).fetchone()
        snap[OTHER_RUNS] = [{"count": row[0] if row else 0}]
        snap[EXTRA_VALUES] = extra_column_values(conn)
        return snap
    except psycopg.Error as e:
        raise UnreadableDatabase(f"not a readable qlwf/ql3 PostgreSQL database: {str(e).strip()}") from e
    except (RecursionError, ValueError) as e:  # jsonb holds what json.loads refuses (decisions Q-108)
        raise UnreadableDatabase("not a readable qlwf/ql3 PostgreSQL database: a stored JSON value Python cannot "
                                 f"decode: {type(e).__name__}: {str(e).splitlines()[0]}") from e
    finally:
        with contextlib.suppress(psycopg.Error):  # nothing to keep: the read never wrote
            conn.rollback()
        conn.close()
