"""The SQL of the SQLite backend: row loads, inserts and compare-and-set updates (storage.md §2–§5).

Everything here is mechanical: which rows to read and write and with which guards. Decisions and
integrity checks live in the shared command logic (`qlwf.impl.commands`). Every compare-and-set must
change exactly one row, otherwise it raises `ConcurrentChange` (storage.md §5). The lock hooks of
the `Store` protocol are no-ops: BEGIN IMMEDIATE already serializes every writer (storage.md §6.1).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from qlwf.impl.commands import guards
from qlwf.impl.commands.failures import ConcurrentChange
from qlwf.impl.commands.guards import SQLITE
from qlwf.impl.commands.store import ACTIVE, ACTIVE_SQL, StoredStepRun
from qlwf.model.canonical import canonical_text

from .codec import (
    ADMISSION_COLUMNS,
    ADMISSION_STEP_COLUMNS,
    ADMISSION_STEPS_TABLE,
    ADMISSIONS_TABLE,
    ATTEMPTS,
    EVENTS,
    LEASES,
    MUTATIONS,
    RUNS,
    STEP_RUNS,
    TASK_RECEIPT_COLUMNS,
    TASK_RECEIPTS_TABLE,
    Codec,
    Record,
    admission_columns,
    admission_step_record,
    admission_step_row,
    insert_sql,
    task_receipt_columns,
)

__all__ = ["ACTIVE", "DATABASE_TIME_SQL", "SqliteStore", "StoredStepRun"]

# storage.md §7: the sub-second Unix epoch in milliseconds, truncated (julianday keeps the fraction
# on SQLite builds that predate unixepoch('subsec')).
DATABASE_TIME_SQL = "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


class Statements(Protocol):
    """What the store needs of its connection: a sqlite3.Connection, or a proxy that injects faults."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor: ...


class SqliteStore:
    """Row-level access over one connection; owns no transaction."""

    def __init__(self, conn: Statements) -> None:
        self.conn = conn

    # ---- locks (no-ops: the IMMEDIATE transaction holds the database's only write lock) and clock --
    def lock_attempt_authority(self, attempt_id: str) -> None:
        pass

    def try_lock_attempt_authorities(self, attempt_ids: Sequence[str]) -> bool:
        return True

    def lock_run(self, run_id: str) -> None:
        pass

    def lock_step_runs(self, run_id: str, step_run_ids: Sequence[str] | None = None) -> None:
        pass

    def lock_attempts(self, attempt_ids: Sequence[str]) -> None:
        pass

    def lock_leases(self, attempt_ids: Sequence[str]) -> None:
        pass

    def database_time(self) -> int:
        (ms,) = self.conn.execute(DATABASE_TIME_SQL).fetchone()
        return int(ms)

    # ---- generic helpers ----------------------------------------------------------------------
    def _one(self, codec: Codec, where: str, params: Iterable[Any]) -> Record | None:
        row = self.conn.execute(f'SELECT {codec.select_list} FROM "{codec.table}" WHERE {where}',
                                tuple(params)).fetchone()
        return None if row is None else codec.to_record(row)

    def _all(self, codec: Codec, where: str, params: Iterable[Any], order: str) -> list[Record]:
        rows = self.conn.execute(f'SELECT {codec.select_list} FROM "{codec.table}" WHERE {where} ORDER BY {order}',
                                 tuple(params)).fetchall()
        return [codec.to_record(r) for r in rows]

    def _cas_with(self, table: str, update: tuple[str, list[Any]], what: str) -> None:
        sql, params = update
        if self.conn.execute(f"UPDATE {table} {sql}", params).rowcount != 1:
            raise ConcurrentChange(what)

    # ---- Runs -----------------------------------------------------------------------------------
    def run(self, run_id: str) -> Record | None:
        return self._one(RUNS, "id = ?", (run_id,))

    def run_exists(self, run_id: str) -> bool:
        return self.conn.execute('SELECT 1 FROM "Runs" WHERE id = ?', (run_id,)).fetchone() is not None

    def insert_run(self, run: Record) -> None:
        self.conn.execute(RUNS.insert_sql(), RUNS.to_row(run))

    def cas_run(self, guard: str, old: Record, new: Record) -> None:
        """Run compare-and-set with one of the guards of storage.md §5."""
        self._cas_with('"Runs"', guards.run(SQLITE, guard, old, new), f"Run {old['id']}")

    # ---- Admissions -----------------------------------------------------------------------------
    def admissions_of_run(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(f'SELECT {", ".join(ADMISSION_COLUMNS)} FROM "{ADMISSIONS_TABLE}" '
                                 "WHERE run_id = ? ORDER BY plan_digest", (run_id,)).fetchall()
        return [dict(zip(ADMISSION_COLUMNS, r, strict=True)) for r in rows]

    def admissions_by_plan_id(self, plan_id: str) -> list[dict[str, Any]]:
        rows = self.conn.execute(f'SELECT {", ".join(ADMISSION_COLUMNS)} FROM "{ADMISSIONS_TABLE}" '
                                 "WHERE plan_id = ? ORDER BY plan_digest", (plan_id,)).fetchall()
        return [dict(zip(ADMISSION_COLUMNS, r, strict=True)) for r in rows]

    def admission_for_run_exists(self, run_id: str) -> bool:
        return self.conn.execute(f'SELECT 1 FROM "{ADMISSIONS_TABLE}" WHERE run_id = ?',
                                 (run_id,)).fetchone() is not None

    def insert_admission(self, plan: Record, receipt: Record) -> None:
        row = admission_columns(plan, receipt)
        self.conn.execute(insert_sql(ADMISSIONS_TABLE, ADMISSION_COLUMNS), tuple(row[c] for c in ADMISSION_COLUMNS))

    def admission_steps(self, plan_digest: str) -> list[Record]:
        rows = self.conn.execute(f'SELECT {", ".join(ADMISSION_STEP_COLUMNS)} FROM "{ADMISSION_STEPS_TABLE}" '
                                 "WHERE plan_digest = ? ORDER BY step_key", (plan_digest,)).fetchall()
        return [admission_step_record(r) for r in rows]

    def insert_admission_step(self, entry: Record) -> None:
        self.conn.execute(insert_sql(ADMISSION_STEPS_TABLE, ADMISSION_STEP_COLUMNS), admission_step_row(entry))

    # ---- StepRuns and the mutation ledger -------------------------------------------------------
    def _step_select(self) -> str:
        return f'SELECT {STEP_RUNS.select_list}, step_run_json FROM "StepRuns"'

    def step_run(self, step_run_id: str) -> StoredStepRun | None:
        row = self.conn.execute(f"{self._step_select()} WHERE id = ?", (step_run_id,)).fetchone()
        return None if row is None else StoredStepRun(STEP_RUNS.to_record(row[:-1]), row[-1])

    def step_runs_of_run(self, run_id: str) -> list[StoredStepRun]:
        rows = self.conn.execute(f"{self._step_select()} WHERE run_id = ? ORDER BY step_key, id", (run_id,)).fetchall()
        return [StoredStepRun(STEP_RUNS.to_record(r[:-1]), r[-1]) for r in rows]

    def existing_step_run_ids(self, ids: list[str]) -> list[str]:
        marks = ", ".join("?" for _ in ids)
        return [r[0] for r in self.conn.execute(f'SELECT id FROM "StepRuns" WHERE id IN ({marks})', ids)]

    def insert_step_run(self, step_run: Record) -> None:
        columns = (*STEP_RUNS.columns, "step_run_json")
        self.conn.execute(insert_sql("StepRuns", columns), (*STEP_RUNS.to_row(step_run), canonical_text(step_run)))

    def cas_step_run(self, mutation: Record) -> None:
        self._cas_with('"StepRuns"', guards.step_run(SQLITE, mutation), f"StepRun {mutation['stepRun']['id']}")

    def insert_mutation(self, entry: Record) -> None:
        self.conn.execute(MUTATIONS.insert_sql(), MUTATIONS.to_row(entry))

    def first_ledger_entry(self, step_run_id: str) -> Record | None:
        return self._one(MUTATIONS, "mutation_id = (SELECT mutation_id FROM \"StepRunMutations\" WHERE step_run_id = ? "
                                    "ORDER BY json_extract(step_run_json, '$.version') LIMIT 1)", (step_run_id,))

    # ---- Events -----------------------------------------------------------------------------------
    def insert_event(self, event: Record) -> None:
        self.conn.execute(EVENTS.insert_sql(), EVENTS.to_row(event))

    def events_up_to(self, run_id: str, sequence: int) -> list[Record]:
        return self._all(EVENTS, "run_id = ? AND sequence <= ?", (run_id, sequence), "sequence")

    def last_event_time(self, run_id: str) -> int | None:
        row = self.conn.execute('SELECT created_at_ms FROM "RunEvents" WHERE run_id = ? ORDER BY sequence DESC LIMIT 1',
                                (run_id,)).fetchone()
        return None if row is None else row[0]

    def timeout_requested(self, run_id: str, attempt_id: str) -> bool:
        return self.conn.execute('SELECT 1 FROM "RunEvents" WHERE run_id = ? AND attempt_id = ? '
                                 "AND type = 'workflow.task_timeout_requested' LIMIT 1",
                                 (run_id, attempt_id)).fetchone() is not None

    # ---- Attempts, receipts, leases ---------------------------------------------------------------
    def attempt(self, attempt_id: str) -> Record | None:
        return self._one(ATTEMPTS, "id = ?", (attempt_id,))

    def active_attempts_of_run(self, run_id: str) -> list[Record]:
        return self._all(ATTEMPTS, f"run_id = ? AND status IN {ACTIVE_SQL}", (run_id,), "id")

    def max_attempt_number(self, run_id: str) -> int:
        (n,) = self.conn.execute('SELECT COALESCE(MAX(attempt), 0) FROM "RunAttempts" WHERE run_id = ?',
                                 (run_id,)).fetchone()
        return int(n)

    def insert_attempt(self, attempt: Record) -> None:
        self.conn.execute(ATTEMPTS.insert_sql(), ATTEMPTS.to_row(attempt))

    def cas_attempt(self, old: Record, new: Record) -> None:
        self._cas_with('"RunAttempts"', guards.attempt(SQLITE, old, new), f"attempt {old['id']}")

    def cas_attempt_convergence(self, old: Record, new: Record) -> None:
        self._cas_with('"RunAttempts"', guards.attempt_convergence(SQLITE, old, new), f"attempt {old['id']}")

    def receipt_row(self, attempt_id: str) -> dict[str, Any] | None:
        return self._receipt("attempt_id = ?", (attempt_id,))

    def receipt_for_epoch(self, run_id: str, step_run_id: str, version: int) -> dict[str, Any] | None:
        return self._receipt("run_id = ? AND step_run_id = ? AND step_run_version = ?", (run_id, step_run_id, version))

    def _receipt(self, where: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
        columns = (*TASK_RECEIPT_COLUMNS, "receipt_json")
        row = self.conn.execute(f'SELECT {", ".join(columns)} FROM "{TASK_RECEIPTS_TABLE}" WHERE {where}',
                                params).fetchone()
        return None if row is None else dict(zip(columns, row, strict=True))

    def insert_receipt(self, receipt: Record, plan: Record) -> None:
        row = task_receipt_columns(receipt, plan)
        self.conn.execute(insert_sql(TASK_RECEIPTS_TABLE, tuple(row)), tuple(row.values()))

    def lease(self, attempt_id: str) -> Record | None:
        return self._one(LEASES, "attempt_id = ?", (attempt_id,))

    def insert_lease(self, lease: Record) -> None:
        self.conn.execute(LEASES.insert_sql(), LEASES.to_row(lease))

    def cas_lease(self, old: Record, new: Record) -> None:
        self._cas_with('"RunDispatchLeases"', guards.lease(SQLITE, old, new), f"lease {old['attemptId']}")
