"""Drift injection for conformance traces (impl.port.FaultInjection).

`corrupt` overwrites one stored record with raw SQL, bypassing the row checks, so that the store
looks exactly like a corrupted one: columns and JSON mirrors are rewritten together (a record-level
drift that the model can mirror). Mirror-only drift (JSON disagreeing with its columns) is not a
record-level state and is exercised by the adapter's own tests instead.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from typing import Any

from qlwf.impl.commands.drift_patch import CORRUPTIBLE_KINDS, patched
from qlwf.model.canonical import canonical_text
from qlwf.model.records import TASK_RECEIPT_KEYS, Record

from .codec import ATTEMPTS, LEASES, RUNS, STEP_RUNS, TASK_RECEIPTS_TABLE, Codec, snake

_CODECS: dict[str, tuple[Codec, str]] = {
    "runs": (RUNS, "id"), "stepRuns": (STEP_RUNS, "id"), "attempts": (ATTEMPTS, "id"), "leases": (LEASES, "attempt_id"),
}


def corrupt(conn: sqlite3.Connection, kind: str, key: list[Any], patch: Record) -> None:
    if kind not in CORRUPTIBLE_KINDS:
        raise ValueError(f"record kind {kind!r} cannot be corrupted (supported: {CORRUPTIBLE_KINDS})")
    conn.execute("PRAGMA ignore_check_constraints = ON")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _rewrite(conn, kind, key[0], patch)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.execute("PRAGMA ignore_check_constraints = OFF")


def _rewrite(conn: sqlite3.Connection, kind: str, key: Any, patch: Record) -> None:
    if kind == "taskReceipts":
        row = conn.execute(f'SELECT receipt_json FROM "{TASK_RECEIPTS_TABLE}" WHERE attempt_id = ?', (key,)).fetchone()
        if row is None:
            raise KeyError(f"no task receipt for {key}")
        new = patched(kind, json.loads(row[0]), patch, TASK_RECEIPT_KEYS)
        columns = [snake(k) for k in TASK_RECEIPT_KEYS[1:]]
        assignments = ", ".join(f"{c} = ?" for c in (*columns, "receipt_json"))
        conn.execute(f'UPDATE "{TASK_RECEIPTS_TABLE}" SET {assignments} WHERE attempt_id = ?',
                     (*(new.get(k) for k in TASK_RECEIPT_KEYS[1:]), canonical_text(new), key))
        return
    codec, pk = _CODECS[kind]
    row = conn.execute(f'SELECT {codec.select_list} FROM "{codec.table}" WHERE {pk} = ?', (key,)).fetchone()
    if row is None:
        raise KeyError(f"no {kind} record {key}")
    new = patched(kind, codec.to_record(row), patch, codec.keys)
    columns = list(codec.columns)
    values = list(codec.to_row(new))
    if kind == "stepRuns":
        columns.append("step_run_json")
        values.append(canonical_text(new))
    assignments = ", ".join(f"{c} = ?" for c in columns)
    conn.execute(f'UPDATE "{codec.table}" SET {assignments} WHERE {pk} = ?', (*values, key))
