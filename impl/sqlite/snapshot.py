"""Read the whole store back as canonical records (commands.md §1.3); read-only, no clock."""

from __future__ import annotations

import json
import operator
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
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


@dataclass(frozen=True)
class KindReader:
    """How one snapshot kind is read: all rows in key order, one row by its key, the row count."""

    table: str
    columns: tuple[str, ...]  # selected, in row order
    key_columns: tuple[str, ...]  # the key, which is also the order (BINARY collation: code points, D-9)
    decode: Decode

    @property
    def sql(self) -> str:
        return (f'SELECT {", ".join(self.columns)} FROM "{self.table}" '
                f'ORDER BY {", ".join(self.key_columns)}')

    @property
    def by_key_sql(self) -> str:
        where = " AND ".join(f"{c} = ?" for c in self.key_columns)
        return f'SELECT {", ".join(self.columns)} FROM "{self.table}" WHERE {where}'

    @property
    def count_sql(self) -> str:
        return f'SELECT count(*) FROM "{self.table}"'

    @property
    def key(self) -> Callable[[Row], Any]:
        """A row's key: the key column's value, or a tuple of them."""
        return operator.itemgetter(*(self.columns.index(c) for c in self.key_columns))


def _codec(codec: Codec, *key: str) -> KindReader:
    return KindReader(codec.table, codec.columns, key, codec.to_record)


def _admission(row: Row, parse: Parse) -> Record:
    return {"planDigest": row[0], "plan": parse(row[1]), "receipt": parse(row[2])}


def _admission_step(row: Row, parse: Parse) -> Record:
    return admission_step_record(row)


def _receipt(row: Row, parse: Parse) -> Record:
    record: Record = parse(row[1])
    return record


# One reader per snapshot kind, in the port's kind order.
READERS: dict[str, KindReader] = {
    "admissions": KindReader(ADMISSIONS_TABLE, ("plan_digest", "plan_json", "receipt_json"), ("plan_digest",),
                             _admission),
    "admissionSteps": KindReader(ADMISSION_STEPS_TABLE, ADMISSION_STEP_COLUMNS, ("plan_digest", "step_key"),
                                 _admission_step),
    "runs": _codec(RUNS, "id"),
    "stepRuns": _codec(STEP_RUNS, "id"),
    "mutations": _codec(MUTATIONS, "mutation_id"),
    "events": _codec(EVENTS, "run_id", "sequence"),
    "attempts": _codec(ATTEMPTS, "id"),
    "taskReceipts": KindReader(TASK_RECEIPTS_TABLE, ("attempt_id", "receipt_json"), ("attempt_id",), _receipt),
    "leases": _codec(LEASES, "attempt_id"),
}
_SQL = {kind: reader.sql for kind, reader in READERS.items()}


def read_snapshot(conn: sqlite3.Connection, parse: Parse = json.loads,
                  kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
    """Every record kind (or only `kinds`) sorted by its key."""
    return {kind: [reader.decode(row, parse) for row in conn.execute(_SQL[kind])]
            for kind, reader in READERS.items() if kinds is None or kind in kinds}


class SnapshotReader:
    """`read_snapshot` for the many reads of one store: each distinct stored row is decoded once.

    A record is a pure function of its row (and `JsonMemo` of its JSON texts), so a row read again
    unchanged gives back the record decoded before, the very same object; only new or changed rows
    are decoded. The rows are still all read from the database, every time: the cache saves
    decoding, never reading. Rows are compared with `==`, which is exact here because every table
    is STRICT with INTEGER and TEXT columns only (tests/test_sqlite_snapshot.py pins that): a row
    holds str, int and None, never a float that `==` would take for an int. Callers must treat the
    records as read-only: they are shared between snapshots (so are their JSON values)."""

    def __init__(self, limit: int = 50_000) -> None:
        self.limit = limit
        self.parse = JsonMemo(limit)
        self._decoded: dict[str, dict[Row, Record]] = {kind: {} for kind in READERS}

    def __call__(self, conn: sqlite3.Connection, kinds: frozenset[str] | None = None) -> dict[str, list[Record]]:
        return {kind: self.records(kind, conn.execute(_SQL[kind]).fetchall())
                for kind in READERS if kinds is None or kind in kinds}

    def records(self, kind: str, rows: list[Row]) -> list[Record]:
        """The records of rows of `kind`, decoding only rows not seen before."""
        decoded = self._decoded[kind]
        if len(decoded) + len(rows) > self.limit:
            decoded.clear()
        decode, parse = READERS[kind].decode, self.parse
        records = []
        for row in rows:
            record = decoded.get(row)
            if record is None:
                record = decoded[row] = decode(row, parse)
            records.append(record)
        return records
