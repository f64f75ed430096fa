"""The SQL of the PostgreSQL backend: row loads, inserts, compare-and-set updates and the lock hooks
(storage.md §2–§6.4). Mechanical only; the shared command logic decides.

JSON is bound as canonical text and cast to jsonb; jsonb read back is rebuilt in canonical key order
(codec.py). Every ORDER BY on text uses the C collation (code-point order).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from qlwf.impl.commands import guards
from qlwf.impl.commands.columns import ADMISSION_JSON_COLUMNS, admission_columns, admission_step_row
from qlwf.impl.commands.failures import ConcurrentChange
from qlwf.impl.commands.guards import POSTGRES
from qlwf.impl.commands.store import ACTIVE_SQL, StoredStepRun
from qlwf.model.canonical import canonical_text

from . import codec
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
    Record,
    Table,
)

# storage.md §6.4: the 64-bit extended text hash of 'ql3-attempt-authority:' || id, seed 0.
AUTHORITY_KEY = "hashtextextended('ql3-attempt-authority:' || {}, 0)"
# storage.md §7: floor of the epoch of clock_timestamp() in milliseconds (not the transaction start).
DATABASE_TIME_SQL = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_STEP_SELECT = f"SELECT {STEP_RUNS.select_list}, step_run_json FROM {STEP_RUNS.name}"
_ADMISSION_SELECT = f"SELECT {', '.join(ADMISSION_COLUMNS)} FROM {ADMISSIONS_TABLE}"
_RECEIPT_SELECT = f"SELECT {', '.join(TASK_RECEIPT_COLUMNS)}, receipt_json FROM {TASK_RECEIPTS_TABLE}"


class PgStore:
    """Row-level access over one connection inside one transaction."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def _fetchone(self, sql: str, params: Iterable[Any] = ()) -> tuple[Any, ...] | None:
        return self.conn.execute(sql, tuple(params)).fetchone()

    def _fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, tuple(params)).fetchall()

    def _one(self, table: Table, where: str, params: Iterable[Any]) -> Record | None:
        row = self._fetchone(f"SELECT {table.select_list} FROM {table.name} WHERE {where}", params)
        return None if row is None else table.to_record(row)

    def _all(self, table: Table, where: str, params: Iterable[Any], order: str) -> list[Record]:
        rows = self._fetchall(f"SELECT {table.select_list} FROM {table.name} WHERE {where} ORDER BY {order}", params)
        return [table.to_record(r) for r in rows]

    def _cas(self, table: str, update: tuple[str, list[Any]], what: str) -> None:
        sql, params = update
        if self.conn.execute(f"UPDATE {table} {sql}", params).rowcount != 1:
            raise ConcurrentChange(what)

    # ---- locks (storage.md §6.3–§6.4) and the database clock (§7) -----------------------------
    def lock_attempt_authority(self, attempt_id: str) -> None:
        self.conn.execute(f"SELECT pg_advisory_xact_lock({AUTHORITY_KEY.format('%s')})", (attempt_id,))

    def try_lock_attempt_authorities(self, attempt_ids: Sequence[str]) -> bool:
        if not attempt_ids:
            return True
        # One round trip; the sorted subquery feeds the try-locks in ascending id order.
        row = self._fetchone(
            f"SELECT bool_and(pg_try_advisory_xact_lock({AUTHORITY_KEY.format('id')})) "
            'FROM (SELECT id FROM unnest(%s::text[]) AS t(id) ORDER BY id COLLATE "C") AS ids',
            (list(attempt_ids),))
        return bool(row and row[0])

    def lock_run(self, run_id: str) -> None:
        self.conn.execute(f"SELECT 1 FROM {RUNS.name} WHERE id = %s FOR UPDATE", (run_id,))

    def lock_step_runs(self, run_id: str, step_run_ids: Sequence[str] | None = None) -> None:
        only = "" if step_run_ids is None else " AND id = ANY(%s)"
        params: tuple[Any, ...] = (run_id,) if step_run_ids is None else (run_id, list(step_run_ids))
        self.conn.execute(f"SELECT 1 FROM {STEP_RUNS.name} WHERE run_id = %s{only} "
                          'ORDER BY step_key COLLATE "C", id COLLATE "C" FOR UPDATE', params)

    def lock_attempts(self, attempt_ids: Sequence[str]) -> None:
        if attempt_ids:
            self.conn.execute(f"SELECT 1 FROM {ATTEMPTS.name} WHERE id = ANY(%s) "
                              'ORDER BY id COLLATE "C" FOR UPDATE', (list(attempt_ids),))

    def lock_leases(self, attempt_ids: Sequence[str]) -> None:
        if attempt_ids:
            self.conn.execute(f"SELECT 1 FROM {LEASES.name} WHERE attempt_id = ANY(%s) "
                              'ORDER BY attempt_id COLLATE "C" FOR UPDATE', (list(attempt_ids),))

    def database_time(self) -> int:
        row = self._fetchone(DATABASE_TIME_SQL)
        assert row is not None
        return int(row[0])

    # ---- Runs -----------------------------------------------------------------------------------
    def run(self, run_id: str) -> Record | None:
        return self._one(RUNS, "id = %s", (run_id,))

    def run_exists(self, run_id: str) -> bool:
        return self._fetchone(f"SELECT 1 FROM {RUNS.name} WHERE id = %s", (run_id,)) is not None

    def insert_run(self, run: Record) -> None:
        self.conn.execute(RUNS.insert_sql, RUNS.to_row(run))

    def cas_run(self, guard: str, old: Record, new: Record) -> None:
        """Run compare-and-set with one of the guards of storage.md §5."""
        self._cas(RUNS.name, guards.run(POSTGRES, guard, old, new), f"Run {old['id']}")

    # ---- Admissions -----------------------------------------------------------------------------
    def admissions_of_run(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._fetchall(f'{_ADMISSION_SELECT} WHERE run_id = %s ORDER BY plan_digest COLLATE "C"', (run_id,))
        return [codec.admission_row(r) for r in rows]

    def admissions_by_plan_id(self, plan_id: str) -> list[dict[str, Any]]:
        rows = self._fetchall(f'{_ADMISSION_SELECT} WHERE plan_id = %s ORDER BY plan_digest COLLATE "C"', (plan_id,))
        return [codec.admission_row(r) for r in rows]

    def admission_for_run_exists(self, run_id: str) -> bool:
        return self._fetchone(f"SELECT 1 FROM {ADMISSIONS_TABLE} WHERE run_id = %s", (run_id,)) is not None

    def insert_admission(self, plan: Record, receipt: Record) -> None:
        row = admission_columns(plan, receipt)
        self.conn.execute(codec.insert_sql(ADMISSIONS_TABLE, ADMISSION_COLUMNS, ADMISSION_JSON_COLUMNS),
                          tuple(row[c] for c in ADMISSION_COLUMNS))

    def admission_steps(self, plan_digest: str) -> list[Record]:
        rows = self._fetchall(f"SELECT {', '.join(ADMISSION_STEP_COLUMNS)} FROM {ADMISSION_STEPS_TABLE} "
                              'WHERE plan_digest = %s ORDER BY step_key COLLATE "C"', (plan_digest,))
        return [codec.admission_step_record(r) for r in rows]

    def insert_admission_step(self, entry: Record) -> None:
        self.conn.execute(codec.insert_sql(ADMISSION_STEPS_TABLE, ADMISSION_STEP_COLUMNS, ("needs_json",)),
                          admission_step_row(entry))

    # ---- StepRuns and the mutation ledger -------------------------------------------------------
    @staticmethod
    def _stored_step(row: Sequence[Any]) -> StoredStepRun:
        return StoredStepRun(STEP_RUNS.to_record(row[:-1]), codec.text(codec.step_run_value(row[-1])))

    def step_run(self, step_run_id: str) -> StoredStepRun | None:
        row = self._fetchone(f"{_STEP_SELECT} WHERE id = %s", (step_run_id,))
        return None if row is None else self._stored_step(row)

    def step_runs_of_run(self, run_id: str) -> list[StoredStepRun]:
        rows = self._fetchall(f'{_STEP_SELECT} WHERE run_id = %s ORDER BY step_key COLLATE "C", id COLLATE "C"',
                              (run_id,))
        return [self._stored_step(r) for r in rows]

    def existing_step_run_ids(self, ids: list[str]) -> list[str]:
        return [r[0] for r in self._fetchall(f"SELECT id FROM {STEP_RUNS.name} WHERE id = ANY(%s)", (ids,))]

    def insert_step_run(self, step_run: Record) -> None:
        columns = (*STEP_RUNS.columns, "step_run_json")
        self.conn.execute(codec.insert_sql(STEP_RUNS.name, columns, ("step_run_json",)),
                          (*STEP_RUNS.to_row(step_run), canonical_text(step_run)))

    def cas_step_run(self, mutation: Record) -> None:
        self._cas(STEP_RUNS.name, guards.step_run(POSTGRES, mutation), f"StepRun {mutation['stepRun']['id']}")

    def insert_mutation(self, entry: Record) -> None:
        self.conn.execute(MUTATIONS.insert_sql, MUTATIONS.to_row(entry))

    def first_ledger_entry(self, step_run_id: str) -> Record | None:
        return self._one(MUTATIONS, f"mutation_id = (SELECT mutation_id FROM {MUTATIONS.name} WHERE step_run_id = %s "
                                    "ORDER BY (step_run_json ->> 'version')::bigint LIMIT 1)", (step_run_id,))

    # ---- Events -----------------------------------------------------------------------------------
    def insert_event(self, event: Record) -> None:
        self.conn.execute(EVENTS.insert_sql, EVENTS.to_row(event))

    def events_up_to(self, run_id: str, sequence: int) -> list[Record]:
        return self._all(EVENTS, "run_id = %s AND sequence <= %s", (run_id, sequence), "sequence")

    def last_event_time(self, run_id: str) -> int | None:
        row = self._fetchone(f"SELECT created_at_ms FROM {EVENTS.name} WHERE run_id = %s "
                             "ORDER BY sequence DESC LIMIT 1", (run_id,))
        return None if row is None else codec.bigint(row[0])

    def timeout_requested(self, run_id: str, attempt_id: str) -> bool:
        return self._fetchone(f"SELECT 1 FROM {EVENTS.name} WHERE run_id = %s AND attempt_id = %s "
                              "AND type = 'workflow.task_timeout_requested' LIMIT 1", (run_id, attempt_id)) is not None

    # ---- Attempts, receipts, leases ---------------------------------------------------------------
    def attempt(self, attempt_id: str) -> Record | None:
        return self._one(ATTEMPTS, "id = %s", (attempt_id,))

    def active_attempts_of_run(self, run_id: str) -> list[Record]:
        return self._all(ATTEMPTS, f"run_id = %s AND status IN {ACTIVE_SQL}", (run_id,), 'id COLLATE "C"')

    def max_attempt_number(self, run_id: str) -> int:
        row = self._fetchone(f"SELECT COALESCE(MAX(attempt), 0) FROM {ATTEMPTS.name} WHERE run_id = %s", (run_id,))
        assert row is not None
        return int(row[0])

    def insert_attempt(self, attempt: Record) -> None:
        self.conn.execute(ATTEMPTS.insert_sql, ATTEMPTS.to_row(attempt))

    def cas_attempt(self, old: Record, new: Record) -> None:
        self._cas(ATTEMPTS.name, guards.attempt(POSTGRES, old, new), f"attempt {old['id']}")

    def cas_attempt_convergence(self, old: Record, new: Record) -> None:
        self._cas(ATTEMPTS.name, guards.attempt_convergence(POSTGRES, old, new), f"attempt {old['id']}")

    def receipt_row(self, attempt_id: str) -> dict[str, Any] | None:
        row = self._fetchone(f"{_RECEIPT_SELECT} WHERE attempt_id = %s", (attempt_id,))
        return None if row is None else codec.receipt_row(row)

    def receipt_for_epoch(self, run_id: str, step_run_id: str, version: int) -> dict[str, Any] | None:
        row = self._fetchone(f"{_RECEIPT_SELECT} WHERE run_id = %s AND step_run_id = %s AND step_run_version = %s",
                             (run_id, step_run_id, version))
        return None if row is None else codec.receipt_row(row)

    def insert_receipt(self, receipt: Record, plan: Record) -> None:
        row = codec.receipt_columns(receipt, plan)
        self.conn.execute(codec.insert_sql(TASK_RECEIPTS_TABLE, tuple(row), ("receipt_json",)), tuple(row.values()))

    def lease(self, attempt_id: str) -> Record | None:
        return self._one(LEASES, "attempt_id = %s", (attempt_id,))

    def insert_lease(self, lease: Record) -> None:
        self.conn.execute(LEASES.insert_sql, LEASES.to_row(lease))

    def cas_lease(self, old: Record, new: Record) -> None:
        self._cas(LEASES.name, guards.lease(POSTGRES, old, new), f"lease {old['attemptId']}")
