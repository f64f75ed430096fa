"""Open a PostgreSQL ql3 database read-only and read it back as a snapshot (`qlwf audit`).

The session starts with `default_transaction_read_only` on and the read runs in one `REPEATABLE READ READ
ONLY` transaction: the server refuses any write, and every table is read from one consistent view of a live
database. The transaction is rolled back, never committed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from qlwf.impl.readonly import MIRRORS, Part, RunByRun, Stream, UnreadableDatabase, merge_by_run, whole
from qlwf.model.records import Record
from qlwf.model.tables import TRIGGER_TYPE

from .codec import ALL_TABLES, ATTEMPTS, LEASES, RUNS, RUNS_TABLE, STEP_RUNS_TABLE
from .snapshot import KINDS

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
_FETCH = 1000  # rows per round trip of each server-side cursor


class PgRuns(RunByRun):
    """The workflow Runs of one PostgreSQL database, read Run by Run inside the connection's REPEATABLE READ
    READ ONLY transaction (one consistent view of a live database): every kind through a server-side cursor
    of its own, ordered by run id, so the client holds one Run at a time (decisions Q-121)."""

    mark, collate, runs_table, percent = "%s", '"C"', RUNS_TABLE, "%%"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._cursors = 0
        self._open: list[psycopg.ServerCursor[Any]] = []
        counts = conn.execute(f"SELECT count(*) FILTER (WHERE trigger_type = %s), "
                              f"count(*) FILTER (WHERE trigger_type IS DISTINCT FROM %s) FROM {RUNS_TABLE}",
                              (TRIGGER_TYPE, TRIGGER_TYPE)).fetchone()
        self.workflow_runs: int = counts[0] if counts else 0
        self.other_runs: int = counts[1] if counts else 0

    def parts(self, run_id: str | None = None) -> Iterator[Part]:
        try:
            runs_sql, decode_run = KINDS["runs"]
            runs = _decoded(self._query(runs_sql, True, run_id), decode_run)
            yield from merge_by_run(runs, self._streams(run_id))
        except psycopg.Error as e:
            raise UnreadableDatabase(f"not a readable qlwf/ql3 PostgreSQL database: {str(e).strip()}") from e
        except (RecursionError, ValueError) as e:  # jsonb holds what json.loads refuses (decisions Q-108)
            raise UnreadableDatabase("not a readable qlwf/ql3 PostgreSQL database: a stored JSON value Python "
                                     f"cannot decode: {type(e).__name__}: {str(e).splitlines()[0]}") from e
        finally:  # however the read ends (done, a bad row, the caller stopping early): the server's cursors go
            for cursor in self._open:
                with contextlib.suppress(psycopg.Error):
                    cursor.close()
            self._open.clear()

    def _execute(self, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        self._cursors += 1
        cursor = self.conn.cursor(name=f"qlwf_audit_{self._cursors}")
        self._open.append(cursor)
        cursor.itersize = _FETCH
        cursor.execute(sql, params)
        return iter(cursor)

    def _generic(self, kind: str) -> tuple[str, tuple[str, ...], list[str]]:
        table = _TABLES[kind]
        schema, name = table.name.split(".")
        present = [c for (c,) in self.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "ORDER BY ordinal_position", (schema, name))]
        return table.name, table.columns, present

    def _streams(self, run_id: str | None) -> list[Stream]:
        streams: list[Stream] = [(kind, _decoded(self._query(sql, False, run_id), decode))
                                 for kind, (sql, decode) in KINDS.items() if kind != "runs"]
        mirrors = self._query(f'SELECT id, step_run_json FROM {STEP_RUNS_TABLE} ORDER BY id COLLATE "C"', False,
                              run_id)
        streams.append((MIRRORS, ((row[0], {"id": row[1], "runId": row[0], "json": row[2]}) for row in mirrors)))
        return streams + self._extra_streams(run_id)


def _decoded(rows: Iterator[tuple[Any, ...]], decode: Callable[[tuple[Any, ...]], Record]
             ) -> Iterator[tuple[str, Record]]:
    for row in rows:
        yield row[0], decode(row[1:])


@contextlib.contextmanager
def open_runs(dsn: str) -> Iterator[PgRuns]:
    """The database at `dsn`, read-only, as its workflow Runs to read one by one."""
    conn = open_read_only(dsn)
    try:
        check_layout(conn)
        if not transaction_read_only(conn):  # a pooler or server setting that overrides the session's
            raise UnreadableDatabase("the server did not open a READ ONLY transaction")
        yield PgRuns(conn)
    except psycopg.Error as e:
        raise UnreadableDatabase(f"not a readable qlwf/ql3 PostgreSQL database: {str(e).strip()}") from e
    finally:
        with contextlib.suppress(psycopg.Error):  # nothing to keep: the read never wrote
            conn.rollback()
        conn.close()


def load(dsn: str) -> dict[str, list[Record]]:
    """Every workflow Run's records in one snapshot (tests, small stores); `qlwf audit` reads Run by Run."""
    with open_runs(dsn) as stored:
        return whole(stored)
