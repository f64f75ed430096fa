"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock."""

from __future__ import annotations

import json
import sqlite3

from .codec import (
    ADMISSION_STEP_COLUMNS,
    ADMISSION_STEPS_TABLE,
    ADMISSIONS_TABLE,
    ATTEMPTS,
    EVENTS,
    LEASES,
    MUTATIONS,
    RUNS,
    STEP_RUNS,
    TASK_RECEIPTS_TABLE,
    Codec,
    Record,
    admission_step_record,
)


def _table(conn: sqlite3.Connection, codec: Codec, order: str) -> list[Record]:
    rows = conn.execute(f'SELECT {codec.select_list} FROM "{codec.table}" ORDER BY {order}').fetchall()
    return [codec.to_record(r) for r in rows]


def read_snapshot(conn: sqlite3.Connection) -> dict[str, list[Record]]:
    """Every record kind sorted by its key; BINARY collation orders text by code point (D-9)."""
    admissions = [
        {"planDigest": pd, "plan": json.loads(plan), "receipt": json.loads(receipt)}
        for pd, plan, receipt in conn.execute(
            f'SELECT plan_digest, plan_json, receipt_json FROM "{ADMISSIONS_TABLE}" ORDER BY plan_digest')
    ]
    admission_steps = [
        admission_step_record(r) for r in conn.execute(
            f'SELECT {", ".join(ADMISSION_STEP_COLUMNS)} FROM "{ADMISSION_STEPS_TABLE}" ORDER BY plan_digest, step_key')
    ]
    receipts = [json.loads(text) for (text,) in conn.execute(
        f'SELECT receipt_json FROM "{TASK_RECEIPTS_TABLE}" ORDER BY attempt_id')]
    return {
        "admissions": admissions,
        "admissionSteps": admission_steps,
        "runs": _table(conn, RUNS, "id"),
        "stepRuns": _table(conn, STEP_RUNS, "id"),
        "mutations": _table(conn, MUTATIONS, "mutation_id"),
        "events": _table(conn, EVENTS, "run_id, sequence"),
        "attempts": _table(conn, ATTEMPTS, "id"),
        "taskReceipts": receipts,
        "leases": _table(conn, LEASES, "attempt_id"),
    }
