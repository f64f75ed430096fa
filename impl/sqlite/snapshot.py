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


Row = tuple[Any, ...]
Decode = Callable[[Row, Parse], Record]


def _codec(codec: Codec, order: str) -> tuple[str, Decode]:
    return f'SELECT {codec.select_list} FROM "{codec.table}" ORDER BY {order}', codec.to_record


def _admission(row: Row, parse: Parse) -> Record:
    return {"planDigest": row[0], "plan": parse(row[1]), "receipt": parse(row[2])}


def _admission_step(row: Row, parse: Parse) -> Record:
    return admission_step_record(row)


def _receipt(row: Row, parse: Parse) -> Record:
    record: Record = parse(row[0])
    return record


# One query and one row decoder per snapshot kind, in the port's kind order; BINARY collation orders
# text by code point (D-9).
READERS: dict[str, tuple[str, Decode]] = {
    "admissions": (f'SELECT plan_digest, plan_json, receipt_json FROM "{ADMISSIONS_TABLE}" ORDER BY plan_digest',
                   _admission),
    "admissionSteps": (f'SELECT {", ".join(ADMISSION_STEP_COLUMNS)} FROM "{ADMISSION_STEPS_TABLE}" '
                       "ORDER BY plan_digest, step_key", _admission_step),
    "runs": _codec(RUNS, "id"),
    "stepRuns": _codec(STEP_RUNS, "id"),
    "mutations": _codec(MUTATIONS, "mutation_id"),
    "events": _codec(EVENTS, "run_id, sequence"),
    "attempts": _codec(ATTEMPTS, "id"),
    "taskReceipts": (f'SELECT receipt_json FROM "{TASK_RECEIPTS_TABLE}" ORDER BY attempt_id', _receipt),
    "leases": _codec(LEASES, "attempt_id"),
}


def read_snapshot(conn: sqlite3.Connection, parse: Parse = json.loads,
                  kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
    """Every record kind (or only `kinds`) sorted by its key."""
    return {kind: [decode(row, parse) for row in conn.execute(sql)]
            for kind, (sql, decode) in READERS.items() if kinds is None or kind in kinds}


class SnapshotReader:
    """`read_snapshot` for the many reads of one store: each distinct stored row is decoded once.

    A record is a pure function of its row (and `JsonMemo` of its JSON texts), so a row read again
    unchanged gives back the record decoded before, the very same object; only new or changed rows
    are decoded. The rows are still all read from the database, every time: the cache saves
    decoding, never reading. Rows are compared with `==`, which is exact here because every table
    is STRICT with INTEGER and TEXT columns only (tests/impl/test_sqlite_snapshot.py pins that): a row
    holds str, int and None, never a float that `==` would take for an int. Callers must treat the
    records as read-only: they are shared between snapshots (so are their JSON values). Decisions
    Q-65."""

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self.parse = JsonMemo(limit)
        self._decoded: dict[str, dict[Row, Record]] = {kind: {} for kind in READERS}

    def __call__(self, conn: sqlite3.Connection, kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
        parse = self.parse
        out: dict[str, list[Record]] = {}
        for kind, (sql, decode) in READERS.items():
            if kinds is not None and kind not in kinds:
                continue
            rows = conn.execute(sql).fetchall()
            decoded = self._decoded[kind]
            if len(decoded) + len(rows) > self.limit:
                decoded.clear()
            records = []
            for row in rows:
                record = decoded.get(row)
                if record is None:
                    record = decoded[row] = decode(row, parse)
                records.append(record)
            out[kind] = records
        return out
