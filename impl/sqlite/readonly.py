"""Open a SQLite ql3 database read-only and read it back as a snapshot (`qlwf audit`).

The file is opened through a `file:PATH?mode=ro` URI, so SQLite itself refuses every write; `query_only`
refuses them a second time. A read-only connection to a WAL database may create an empty `-wal` and the
`-shm` index when they are missing (SQLite's reader protocol); the database and any WAL content are never
changed. The whole read is one deferred transaction: one consistent view of a live database.
"""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.parse

from qlwf.impl.readonly import (
    EXTRA_VALUES,
    GENERIC_TABLES,
    MIRRORS,
    OTHER_RUNS,
    STORED_JSON,
    UnreadableDatabase,
    quote_identifier,
)
from qlwf.model.records import Record
from qlwf.model.tables import TRIGGER_TYPE

from .codec import ADMISSION_STEPS_TABLE, ADMISSIONS_TABLE, ATTEMPTS, LEASES, RUNS, TASK_RECEIPTS_TABLE
from .snapshot import JsonMemo, read_snapshot, workflow_rows

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


def stored_json_texts(conn: sqlite3.Connection) -> list[Record]:
    """Every stored JSON text with the Run it belongs to, as stored (a value that is not TEXT as well)."""
    out: list[Record] = []
    for table, keys, column, holds in JSON_COLUMNS:
        key_list = ", ".join(keys)
        query = workflow_rows(f'SELECT run_id, {key_list}, {column} FROM "{table}" ORDER BY {key_list}')
        for run_id, *key, text in conn.execute(query, (TRIGGER_TYPE,)):
            out.append({"runId": run_id, "table": table, "column": column, "key": key, "holds": holds, "text": text})
    return out


_CODECS = {"runs": RUNS, "attempts": ATTEMPTS, "leases": LEASES}


def extra_column_values(conn: sqlite3.Connection) -> list[Record]:
    """Every non-NULL value of a workflow Run's row in a column outside the v1 subset (storage.md §9)."""
    out: list[Record] = []
    for kind, key, run in GENERIC_TABLES:
        codec = _CODECS[kind]
        present = [name for _, name, *_ in conn.execute(f'PRAGMA table_info("{codec.table}")')]
        for column in (c for c in present if c not in codec.columns):
            query = workflow_rows(f'SELECT {run}, {key} FROM "{codec.table}" ORDER BY {key}', kind == "runs",
                                  also=f"{quote_identifier(column)} IS NOT NULL")
            out += [{"runId": r, "kind": kind, "key": k, "column": column}
                    for r, k in conn.execute(query, (TRIGGER_TYPE,))]
    return out


def load(path: str | os.PathLike[str]) -> dict[str, list[Record]]:
    conn = open_read_only(path)
    try:
        conn.execute("BEGIN DEFERRED")
        try:
            snap = read_snapshot(conn, JsonMemo(), workflow_only=True)
            snap[MIRRORS] = [{"id": i, "runId": r, "json": json.loads(text)} for i, r, text in conn.execute(
                workflow_rows('SELECT id, run_id, step_run_json FROM "StepRuns" ORDER BY id'),
                (TRIGGER_TYPE,))]
            snap[STORED_JSON] = stored_json_texts(conn)
            (others,), = conn.execute('SELECT count(*) FROM "Runs" WHERE trigger_type IS NOT ?', (TRIGGER_TYPE,))
            snap[OTHER_RUNS] = [{"count": others}]
            snap[EXTRA_VALUES] = extra_column_values(conn)
            return snap
        finally:
            conn.execute("ROLLBACK")
    except (sqlite3.Error, ValueError, RecursionError) as e:  # missing columns or tables, malformed JSON text
        raise UnreadableDatabase(f"{os.fspath(path)}: not a readable qlwf/ql3 SQLite database: {e}") from e
    finally:
        conn.close()
