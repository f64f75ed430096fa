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


def _admissions(conn: sqlite3.Connection, parse: Parse) -> list[Record]:
    return [{"planDigest": pd, "plan": parse(plan), "receipt": parse(receipt)}
            for pd, plan, receipt in conn.execute(
                f'SELECT plan_digest, plan_json, receipt_json FROM "{ADMISSIONS_TABLE}" ORDER BY plan_digest')]


def _admission_steps(conn: sqlite3.Connection, parse: Parse) -> list[Record]:
    return [admission_step_record(r) for r in conn.execute(
        f'SELECT {", ".join(ADMISSION_STEP_COLUMNS)} FROM "{ADMISSION_STEPS_TABLE}" ORDER BY plan_digest, step_key')]


def _receipts(conn: sqlite3.Connection, parse: Parse) -> list[Record]:
    return [parse(text) for (text,) in conn.execute(
        f'SELECT receipt_json FROM "{TASK_RECEIPTS_TABLE}" ORDER BY attempt_id')]


# One reader per snapshot kind, in the port's kind order; BINARY collation orders text by code point (D-9).
READERS: dict[str, Callable[[sqlite3.Connection, Parse], list[Record]]] = {
    "admissions": _admissions,
    "admissionSteps": _admission_steps,
    "runs": lambda conn, parse: _table(conn, RUNS, "id", parse),
    "stepRuns": lambda conn, parse: _table(conn, STEP_RUNS, "id", parse),
    "mutations": lambda conn, parse: _table(conn, MUTATIONS, "mutation_id", parse),
    "events": lambda conn, parse: _table(conn, EVENTS, "run_id, sequence", parse),
    "attempts": lambda conn, parse: _table(conn, ATTEMPTS, "id", parse),
    "taskReceipts": _receipts,
    "leases": lambda conn, parse: _table(conn, LEASES, "attempt_id", parse),
}


def read_snapshot(conn: sqlite3.Connection, parse: Parse = json.loads,
                  kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
    """Every record kind (or only `kinds`) sorted by its key."""
    return {kind: read(conn, parse) for kind, read in READERS.items() if kinds is None or kind in kinds}
