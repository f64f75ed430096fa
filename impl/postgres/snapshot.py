"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock.

One round trip: the nine SELECTs (or those of the kinds asked for) go out as one pipeline of
prepared statements (wire.py), which PostgreSQL runs as one implicit transaction, up to its Sync.
jsonb values are read as text, parsed and rebuilt in canonical key order; with a `RowMemo`, a row seen
before (the same text, column for column) gives the record it gave then.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from qlwf.impl.commands import columns
from qlwf.model.records import Record

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
    Table,
    admission_receipt_value,
    plan_value,
    task_receipt_value,
)
from .session import PgSession


def _select(table: Table, order: str) -> str:
    return f"SELECT {table.text_select_list} FROM {table.name} ORDER BY {order}"


Row = tuple[Any, ...]


def _table(table: Table) -> Callable[[Row], Record]:
    return lambda row: table.to_record(row, parse=json.loads)


# Per snapshot kind, in the port's kind order: its SELECT (jsonb as text) and how a row becomes a record.
KINDS: dict[str, tuple[str, Callable[[Row], Record]]] = {
    "admissions": (f"SELECT plan_digest, plan_json::text, receipt_json::text FROM {ADMISSIONS_TABLE} "
                   'ORDER BY plan_digest COLLATE "C"',
                   lambda r: {"planDigest": r[0], "plan": plan_value(json.loads(r[1])),
                              "receipt": admission_receipt_value(json.loads(r[2]))}),
    "admissionSteps": (f"SELECT {', '.join(c + '::text' if c == 'needs_json' else c for c in ADMISSION_STEP_COLUMNS)} "
                       f'FROM {ADMISSION_STEPS_TABLE} ORDER BY plan_digest COLLATE "C", step_key COLLATE "C"',
                       lambda r: columns.admission_step_record(r, json.loads)),
    "runs": (_select(RUNS, 'id COLLATE "C"'), _table(RUNS)),
    "stepRuns": (_select(STEP_RUNS, 'id COLLATE "C"'), _table(STEP_RUNS)),
    "mutations": (_select(MUTATIONS, 'mutation_id COLLATE "C"'), _table(MUTATIONS)),
    "events": (_select(EVENTS, 'run_id COLLATE "C", sequence'), _table(EVENTS)),
    "attempts": (_select(ATTEMPTS, 'id COLLATE "C"'), _table(ATTEMPTS)),
    "taskReceipts": (f'SELECT receipt_json::text FROM {TASK_RECEIPTS_TABLE} ORDER BY attempt_id COLLATE "C"',
                     lambda r: task_receipt_value(json.loads(r[0]))),
    "leases": (_select(LEASES, 'attempt_id COLLATE "C"'), _table(LEASES)),
}


class RowMemo:
    """Records by the exact row they were rebuilt from (jsonb as its text, so a row hashes). Between two
    read-backs most rows are unchanged, and a record is a pure function of its row, so re-reading a
    store costs a hash per unchanged row. Callers must treat snapshot records as read-only: they are
    shared between snapshots (as the SQLite reader shares decoded JSON, impl/sqlite/snapshot.py)."""

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self._memo: dict[tuple[str, Row], Record] = {}

    def record(self, kind: str, row: Row, decode: Callable[[Row], Record]) -> Record:
        key = (kind, row)
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= self.limit:
                self._memo.clear()
            found = self._memo[key] = decode(row)
        return found


def read_snapshot(conn: PgSession, kinds: frozenset[str] | None = None,
                  memo: RowMemo | None = None) -> dict[str, list[Record]]:
    """Every kind (or only `kinds`, still one round trip) in canonical form."""
    chosen = list(KINDS) if kinds is None else [k for k in KINDS if k in kinds]
    if not chosen:
        return {}
    results = conn.fetch_each([(KINDS[k][0], ()) for k in chosen])
    if memo is None:
        return {kind: [KINDS[kind][1](r) for r in rows] for kind, rows in zip(chosen, results, strict=True)}
    return {kind: [memo.record(kind, r, KINDS[kind][1]) for r in rows]
            for kind, rows in zip(chosen, results, strict=True)}
