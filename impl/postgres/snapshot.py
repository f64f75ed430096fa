"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock.

One round trip: the nine SELECTs (or those of the kinds asked for) go out as one pipeline of
prepared statements (wire.py), which PostgreSQL runs as one implicit transaction, up to its Sync.
jsonb values are rebuilt in canonical key order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from .session import PgSession


def _select(table: Table, order: str) -> str:
    return f"SELECT {table.select_list} FROM {table.name} ORDER BY {order}"


Row = tuple[Any, ...]

# Per snapshot kind, in the port's kind order: its SELECT and how a row becomes a record.
_KINDS: dict[str, tuple[str, Callable[[Row], Record]]] = {
    "admissions": (f"SELECT plan_digest, plan_json, receipt_json FROM {ADMISSIONS_TABLE} "
                   'ORDER BY plan_digest COLLATE "C"',
                   lambda r: {"planDigest": r[0], "plan": plan_value(r[1]), "receipt": admission_receipt_value(r[2])}),
    "admissionSteps": (f"SELECT {', '.join(ADMISSION_STEP_COLUMNS)} FROM {ADMISSION_STEPS_TABLE} "
                       'ORDER BY plan_digest COLLATE "C", step_key COLLATE "C"', admission_step_record),
    "runs": (_select(RUNS, 'id COLLATE "C"'), RUNS.to_record),
    "stepRuns": (_select(STEP_RUNS, 'id COLLATE "C"'), STEP_RUNS.to_record),
    "mutations": (_select(MUTATIONS, 'mutation_id COLLATE "C"'), MUTATIONS.to_record),
    "events": (_select(EVENTS, 'run_id COLLATE "C", sequence'), EVENTS.to_record),
    "attempts": (_select(ATTEMPTS, 'id COLLATE "C"'), ATTEMPTS.to_record),
    "taskReceipts": (f'SELECT receipt_json FROM {TASK_RECEIPTS_TABLE} ORDER BY attempt_id COLLATE "C"',
                     lambda r: task_receipt_value(r[0])),
    "leases": (_select(LEASES, 'attempt_id COLLATE "C"'), LEASES.to_record),
}


def read_snapshot(conn: PgSession, kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
    """Every kind (or only `kinds`, still one round trip) in canonical form."""
    chosen = list(_KINDS) if kinds is None else [k for k in _KINDS if k in kinds]
    if not chosen:
        return {}
    results = conn.fetch_each([(_KINDS[k][0], ()) for k in chosen])
    return {kind: [_KINDS[kind][1](r) for r in rows] for kind, rows in zip(chosen, results, strict=True)}
