"""Open a SQLite ql3 database read-only and read its workflow Runs back one by one (`qlwf audit`).

The file is opened through a `file:PATH?mode=ro` URI, so SQLite itself refuses every write; `query_only`
refuses them a second time. A read-only connection to a WAL database may create an empty `-wal` and the
`-shm` index when they are missing (SQLite's reader protocol); the database and any WAL content are never
changed. The whole read is one deferred transaction: one consistent view of a live database.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Any

from qlwf.impl.readonly import MIRRORS, STORED_JSON, Part, RunByRun, Stream, UnreadableDatabase, merge_by_run, whole
from qlwf.model.records import Record
from qlwf.model.tables import TRIGGER_TYPE

from .codec import ADMISSION_STEPS_TABLE, ADMISSIONS_TABLE, ATTEMPTS, LEASES, RUNS, TASK_RECEIPTS_TABLE
from .snapshot import READERS, Decode, JsonMemo

# Every JSON column of storage.md §2: (table, its key columns, the column, the record it holds or None for
# a payload or a needs array); every one of these tables has run_id.
JSON_COLUMNS: tuple[tuple[str, tuple[str, ...], str, str | None], ...] = (
    ("StepRuns", ("id",), "step_run_json", "stepRun"),
    ("StepRunMutations", ("mutation_id",), "step_run_json", "stepRun"),
    ("RunEvents", ("id",), "payload", None),
    (ADMISSIONS_TABLE, ("plan_digest",), "plan_json", "plan"),
    (ADMISSIONS_TABLE, ("plan_digest",), "receipt_json", "admissionReceipt"),
    (ADMISSION_STEPS_TABLE, ("plan_digest", "step_key"), "needs_json", None),
    (TASK_RECEIPTS_TABLE, ("attempt_id",), "receipt_json", "taskReceipt"),
)
REQUIRED_TABLES = frozenset({"Runs", "RunAttempts", "RunDispatchLeases", "RunEvents", "StepRuns", "StepRunMutations",
                             ADMISSIONS_TABLE, ADMISSION_STEPS_TABLE, TASK_RECEIPTS_TABLE})


def open_read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    target = os.fspath(path)
    if not os.path.isfile(target):  # mode=ro never creates a file, but says only "unable to open"
        raise UnreadableDatabase(f"{target}: no such file")
    uri = f"file:{urllib.parse.quote(os.path.abspath(target))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as e:
        raise UnreadableDatabase(f"{target}: {e}") from e
    try:
        conn.execute("PRAGMA query_only = ON")
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as e:  # e.g. "file is not a database": known only at the first read
        conn.close()
        raise UnreadableDatabase(f"{target}: {e}") from e
    missing = sorted(REQUIRED_TABLES - names)
    if missing:
        conn.close()
        raise UnreadableDatabase(f"{target}: not a qlwf/ql3 SQLite schema (missing tables {', '.join(missing)})")
    return conn


class SqliteRuns(RunByRun):
    """The workflow Runs of one SQLite database, read Run by Run inside one deferred transaction (one
    consistent view of a live database): every kind in one pass, ordered by run id (decisions Q-121)."""

    mark, collate, runs_table = "?", "BINARY", '"Runs"'

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self.conn = conn
        self.path = path
        self.parse = JsonMemo(1_000)  # small: Runs rarely share a text, and the read holds one Run at a time
        (self.workflow_runs,), = conn.execute('SELECT count(*) FROM "Runs" WHERE trigger_type = ?', (TRIGGER_TYPE,))
        (self.other_runs,), = conn.execute('SELECT count(*) FROM "Runs" WHERE trigger_type IS NOT ?',
                                           (TRIGGER_TYPE,))

    def parts(self, run_id: str | None = None) -> Iterator[Part]:
        try:
            yield from merge_by_run(self._rows(READERS["runs"], True, run_id), self._streams(run_id))
        except (sqlite3.Error, ValueError, RecursionError) as e:  # missing columns, malformed JSON text
            raise UnreadableDatabase(f"{self.path}: not a readable qlwf/ql3 SQLite database: {e}") from e

    def _execute(self, sql: str, params: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        return iter(self.conn.execute(sql, params))

    def _generic(self, kind: str) -> tuple[str, tuple[str, ...], list[str]]:
        codec = _CODECS[kind]
        present = [name for _, name, *_ in self.conn.execute(f'PRAGMA table_info("{codec.table}")')]
        return f'"{codec.table}"', codec.columns, present

    def _rows(self, reader: tuple[str, Decode], runs: bool, run_id: str | None) -> Iterator[tuple[str, Record]]:
        sql, decode = reader
        return ((row[0], decode(row[1:], self.parse)) for row in self._query(sql, runs, run_id))

    def _streams(self, run_id: str | None) -> list[Stream]:
        streams: list[Stream] = [(kind, self._rows(reader, False, run_id))
                                 for kind, reader in READERS.items() if kind != "runs"]
        streams.append((MIRRORS, ((row[0], {"id": row[1], "runId": row[0], "json": json.loads(row[2])})
                                  for row in self._query('SELECT id, step_run_json FROM "StepRuns" ORDER BY id',
                                                         False, run_id))))
        for table, keys, column, holds in JSON_COLUMNS:
            key_list = ", ".join(keys)
            texts = self._query(f'SELECT {key_list}, {column} FROM "{table}" ORDER BY {key_list}', False, run_id)
            streams.append((STORED_JSON, stored_texts(texts, table, column, holds)))
        return streams + self._extra_streams(run_id)


_CODECS = {"runs": RUNS, "attempts": ATTEMPTS, "leases": LEASES}


def stored_texts(rows: Iterator[tuple[Any, ...]], table: str, column: str,
                 holds: str | None) -> Iterator[tuple[str, Record]]:
    """STORED_JSON entries of one JSON column (a function, so that each stream keeps its own column)."""
    for row in rows:
        yield row[0], {"runId": row[0], "table": table, "column": column, "key": list(row[1:-1]), "holds": holds,
                       "text": row[-1]}


@contextlib.contextmanager
def open_runs(path: str | os.PathLike[str]) -> Iterator[SqliteRuns]:
    """The database at `path`, read-only, as its workflow Runs to read one by one."""
    conn = open_read_only(path)
    try:
        conn.execute("BEGIN DEFERRED")
        try:
            yield SqliteRuns(conn, os.fspath(path))
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error as e:  # missing tables or columns at the first counts
        raise UnreadableDatabase(f"{os.fspath(path)}: not a readable qlwf/ql3 SQLite database: {e}") from e
    finally:
        conn.close()


def load(path: str | os.PathLike[str]) -> dict[str, list[Record]]:
    """Every workflow Run's records in one snapshot (tests, small stores); `qlwf audit` reads Run by Run."""
    with open_runs(path) as stored:
        return whole(stored)
