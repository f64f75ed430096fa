"""Drift injection for conformance traces on PostgreSQL (impl.port.FaultInjection).

A corrupted store violates row checks that PostgreSQL cannot switch off per statement, so the
corrupting write runs in one transaction that drops the table's CHECK constraints, rewrites the row
(columns and JSON mirror together, foreign-key triggers off via session_replication_role) and adds
the same checks back NOT VALID: later writes are checked again, the corrupted row is left as is.
`PgDatabase.reset` revalidates them once the rows are gone.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg import sql
from qlwf.impl.commands.drift_patch import CORRUPTIBLE_KINDS, patched
from qlwf.model.canonical import canonical_text
from qlwf.model.records import TASK_RECEIPT_KEYS, Record

from .codec import ATTEMPTS, LEASES, RUNS, STEP_RUNS, TASK_RECEIPTS_TABLE, Table, source_revision, task_receipt_value
from .codec import TASK_RECEIPT_COLUMNS as RECEIPT_COLUMNS

_TABLES: dict[str, tuple[Table, str]] = {
    "runs": (RUNS, "id"), "stepRuns": (STEP_RUNS, "id"), "attempts": (ATTEMPTS, "id"), "leases": (LEASES, "attempt_id"),
}
_CHECKS_SQL = ("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
               "WHERE conrelid = %s::regclass AND contype = 'c' ORDER BY conname")


def corrupt(conn: psycopg.Connection[Any], kind: str, key: list[Any], patch: Record) -> None:
    if kind not in CORRUPTIBLE_KINDS:
        raise ValueError(f"record kind {kind!r} cannot be corrupted (supported: {CORRUPTIBLE_KINDS})")
    table = TASK_RECEIPTS_TABLE if kind == "taskReceipts" else _TABLES[kind][0].name
    conn.execute("BEGIN")
    try:
        # FK triggers off for this write; needs superuser, so a weaker role just keeps them on.
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
        checks = conn.execute(_CHECKS_SQL, (table,)).fetchall()
        ident = sql.SQL(table)
        if checks:
            conn.execute(sql.SQL("ALTER TABLE {} ").format(ident) + sql.SQL(", ").join(
                sql.SQL("DROP CONSTRAINT {}").format(sql.Identifier(name)) for name, _ in checks))
        _rewrite(conn, kind, key[0], patch)
        if checks:
            conn.execute(sql.SQL("ALTER TABLE {} ").format(ident) + sql.SQL(", ").join(
                sql.SQL("ADD CONSTRAINT {} {} NOT VALID").format(
                    sql.Identifier(name), sql.SQL(definition.removesuffix(" NOT VALID")))
                for name, definition in checks))
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        raise


def _rewrite(conn: psycopg.Connection[Any], kind: str, key: Any, patch: Record) -> None:
    if kind == "taskReceipts":
        row = conn.execute(f"SELECT receipt_json FROM {TASK_RECEIPTS_TABLE} WHERE attempt_id = %s",
                           (key,)).fetchone()
        if row is None:
            raise KeyError(f"no task receipt for {key}")
        new = patched(kind, task_receipt_value(row[0]), patch, TASK_RECEIPT_KEYS)
        values = [new.get(k) for k in TASK_RECEIPT_KEYS[1:]]
        assignments = ", ".join([*(f"{c} = %s" for c in RECEIPT_COLUMNS), "receipt_json = %s::jsonb",
                                 "source_revision = %s"])
        revision = source_revision(new["taskRevision"]) if isinstance(new.get("taskRevision"), str) else None
        conn.execute(f"UPDATE {TASK_RECEIPTS_TABLE} SET {assignments} WHERE attempt_id = %s",
                     (*values, canonical_text(new), revision, key))
        return
    table, pk = _TABLES[kind]
    row = conn.execute(f"SELECT {table.select_list} FROM {table.name} WHERE {pk} = %s",
                       (key,)).fetchone()
    if row is None:
        raise KeyError(f"no {kind} record {key}")
    new = patched(kind, table.to_record(row), patch, table.layout.keys)
    columns = list(table.columns)
    values = list(table.to_row(new))
    placeholders = ["%s"] * len(columns)
    if kind == "stepRuns":
        columns.append("step_run_json")
        values.append(canonical_text(new))
        placeholders.append("%s::jsonb")
    assignments = ", ".join(f"{c} = {p}" for c, p in zip(columns, placeholders, strict=True))
    conn.execute(f"UPDATE {table.name} SET {assignments} WHERE {pk} = %s", (*values, key))
