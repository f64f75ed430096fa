"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock.

One round trip: the nine SELECTs go out as one simple-protocol script, which PostgreSQL runs as one
implicit transaction (a consistent view). jsonb values are rebuilt in canonical key order.
"""

from __future__ import annotations

from typing import Any

import psycopg

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
    Record,
    Table,
    admission_receipt_value,
    admission_step_record,
    plan_value,
    task_receipt_value,
)


def _select(table: Table, order: str) -> str:
    return f"SELECT {table.select_list} FROM {table.name} ORDER BY {order}"


_SCRIPT = "; ".join([
    f'SELECT plan_digest, plan_json, receipt_json FROM {ADMISSIONS_TABLE} ORDER BY plan_digest COLLATE "C"',
    f"SELECT {', '.join(ADMISSION_STEP_COLUMNS)} FROM {ADMISSION_STEPS_TABLE} "
    'ORDER BY plan_digest COLLATE "C", step_key COLLATE "C"',
    _select(RUNS, 'id COLLATE "C"'),
    _select(STEP_RUNS, 'id COLLATE "C"'),
    _select(MUTATIONS, 'mutation_id COLLATE "C"'),
    _select(EVENTS, 'run_id COLLATE "C", sequence'),
    _select(ATTEMPTS, 'id COLLATE "C"'),
    f'SELECT receipt_json FROM {TASK_RECEIPTS_TABLE} ORDER BY attempt_id COLLATE "C"',
    _select(LEASES, 'attempt_id COLLATE "C"'),
])


def read_snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[Record]]:
    cur = conn.execute(_SCRIPT)
    results: list[list[tuple[Any, ...]]] = [cur.fetchall()]
    while cur.nextset():
        results.append(cur.fetchall())
    admissions, steps, runs, step_runs, mutations, events, attempts, receipts, leases = results
    return {
        "admissions": [{"planDigest": pd, "plan": plan_value(plan), "receipt": admission_receipt_value(receipt)}
                       for pd, plan, receipt in admissions],
        "admissionSteps": [admission_step_record(r) for r in steps],
        "runs": [RUNS.to_record(r) for r in runs],
        "stepRuns": [STEP_RUNS.to_record(r) for r in step_runs],
        "mutations": [MUTATIONS.to_record(r) for r in mutations],
        "events": [EVENTS.to_record(r) for r in events],
        "attempts": [ATTEMPTS.to_record(r) for r in attempts],
        "taskReceipts": [task_receipt_value(r) for (r,) in receipts],
        "leases": [LEASES.to_record(r) for r in leases],
    }
