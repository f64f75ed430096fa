"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock."""

from __future__ import annotations

import json
import sqlite3
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
    Codec,
    Record,
    admission_step_record,
)

Parse = Callable[[str], Any]


class JsonMemo:
    """Decoded JSON by exact stored text. Stored JSON rarely changes between two snapshots, and the
    decoded value of a text is a pure function of it, so re-reading a store stays cheap. Callers
    must treat snapshot records as read-only (they may be shared between snapshots)."""

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self._memo: dict[str, Any] = {}

    def __call__(self, text: str) -> Any:
        value = self._memo.get(text)
        if value is None:
            if len(self._memo) >= self.limit:
                self._memo.clear()
            value = self._memo[text] = json.loads(text)
        return value



def _table(conn: sqlite3.Connection, codec: Codec, order: str, parse: Parse) -> list[Record]:
    rows = conn.execute(f'SELECT {codec.select_list} FROM "{codec.table}" ORDER BY {order}').fetchall()
    return [codec.to_record(r, parse) for r in rows]


def read_snapshot(conn: sqlite3.Connection, parse: Parse = json.loads) -> dict[str, list[Record]]:
    """Every record kind sorted by its key; BINARY collation orders text by code point (D-9)."""
    admissions = [
        {"planDigest": pd, "plan": parse(plan), "receipt": parse(receipt)}
        for pd, plan, receipt in conn.execute(
            f'SELECT plan_digest, plan_json, receipt_json FROM "{ADMISSIONS_TABLE}" ORDER BY plan_digest')
    ]
    admission_steps = [
        admission_step_record(r) for r in conn.execute(
            f'SELECT {", ".join(ADMISSION_STEP_COLUMNS)} FROM "{ADMISSION_STEPS_TABLE}" ORDER BY plan_digest, step_key')
    ]
    receipts = [parse(text) for (text,) in conn.execute(
        f'SELECT receipt_json FROM "{TASK_RECEIPTS_TABLE}" ORDER BY attempt_id')]
    return {
        "admissions": admissions,
        "admissionSteps": admission_steps,
        "runs": _table(conn, RUNS, "id", parse),
        "stepRuns": _table(conn, STEP_RUNS, "id", parse),
        "mutations": _table(conn, MUTATIONS, "mutation_id", parse),
        "events": _table(conn, EVENTS, "run_id, sequence", parse),
        "attempts": _table(conn, ATTEMPTS, "id", parse),
        "taskReceipts": receipts,
        "leases": _table(conn, LEASES, "attempt_id", parse),
    }
