"""The SQL of the PostgreSQL backend: row loads, inserts, compare-and-set updates and the lock hooks
(storage.md §2–§6.4). Mechanical only; the shared command logic decides.

JSON is bound as canonical text and cast to jsonb; jsonb read back is rebuilt in canonical key order
(codec.py). Every ORDER BY on text uses the C collation (code-point order).

Round trips (docs/decisions.md Q-62). The store talks to a `PgSession`, which queues statements
nobody waits for and sends them with the next statement whose rows are needed:

* Locks are queued, one statement per level of storage.md §6.3, in the order the shared lock
  phase asks for them, and return the columns of the rows they lock (`SELECT <columns> … FOR
  UPDATE`: the same rows, locked in the same order, as `SELECT 1 … FOR UPDATE`). The rows go into
  the try's `RowCache`, which answers the command's later reads of them.
* While the transaction reads one snapshot, the reads every command of that lock scope makes
  next — the Run's admission (immutable), its last event time, an attempt's receipt (immutable) —
  are queued right behind the lock that names their key.
* Writes (inserts and compare-and-sets) are queued and go out with COMMIT, or with the next read,
  which then sees them. A compare-and-set that matches no row raises on the server
  (`ql3.require_one_row`), which aborts the rest of the batch and is reported as `ConcurrentChange`.
  Each write first drops the cache entries it could change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from qlwf.impl.commands import guards
from qlwf.impl.commands.columns import ADMISSION_JSON_COLUMNS, admission_columns, admission_step_row
from qlwf.impl.commands.guards import POSTGRES
from qlwf.impl.commands.store import ACTIVE_SQL, StoredStepRun
from qlwf.model.canonical import canonical_text
from qlwf.model.records import Record

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
    Table,
)
from .rowcache import MISSING, Key, RowCache
from .session import PgSession
from .wire import Row

# storage.md §6.4: the 64-bit extended text hash of 'ql3-attempt-authority:' || id, seed 0.
AUTHORITY_KEY = "hashtextextended('ql3-attempt-authority:' || {}, 0)"
# storage.md §7: floor of the epoch of clock_timestamp() in milliseconds (not the transaction start).
DATABASE_TIME_SQL = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
# storage.md §5: a compare-and-set that changes no row fails on the server (schema.sql), aborting its batch.
CAS_SQL = "WITH cas AS (UPDATE {table} {update} RETURNING 1) SELECT ql3.require_one_row((SELECT count(*) FROM cas), %s)"

_STEP_SELECT = f"SELECT {STEP_RUNS.select_list}, step_run_json FROM {STEP_RUNS.name}"
_ADMISSION_SELECT = f"SELECT {', '.join(ADMISSION_COLUMNS)} FROM {ADMISSIONS_TABLE}"
_RECEIPT_SELECT = f"SELECT {', '.join(TASK_RECEIPT_COLUMNS)}, receipt_json FROM {TASK_RECEIPTS_TABLE}"
_STEP_ORDER = 'ORDER BY step_key COLLATE "C", id COLLATE "C"'


class PgStore:
    """Row-level access over one session inside one transaction."""

    def __init__(self, conn: PgSession) -> None:
        self.conn = conn
        self.cache = RowCache(conn.flush)

    def _fetchone(self, sql: str, params: Iterable[Any] = ()) -> Row | None:
        return self.conn.fetchone(sql, tuple(params))

    def _fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[Row]:
        return self.conn.fetchall(sql, tuple(params))

    def _one(self, table: Table, where: str, params: Iterable[Any]) -> Record | None:
        row = self._fetchone(f"SELECT {table.select_list} FROM {table.name} WHERE {where}", params)
        return None if row is None else table.to_record(row)

    def _all(self, table: Table, where: str, params: Iterable[Any], order: str) -> list[Record]:
        rows = self._fetchall(f"SELECT {table.select_list} FROM {table.name} WHERE {where} ORDER BY {order}", params)
        return [table.to_record(r) for r in rows]

    def _write(self, sql: str, params: Sequence[Any], *changes: Key) -> None:
        self.cache.drop(*changes)
        self.conn.queue(sql, params)

    def _cas(self, table: str, update: tuple[str, list[Any]], what: str, *changes: Key) -> None:
        sql, params = update
        self._write(CAS_SQL.format(table=table, update=sql), (*params, what), *changes)

    def _ahead(self, key: Key, sql: str, params: Sequence[Any], value: Any) -> None:
        """Queue a read whose answer is `value(rows)`, for `key` (only while one snapshot is read)."""
        if not self.conn.pinned_snapshot:
            return
        token = self.cache.expect(key)
        self.conn.queue(sql, params, lambda rows: self.cache.fill(key, token, value(rows)))

    def _by_key(self, what: str, keys: Sequence[str], sql: str, params: Sequence[Any], key_of: Any,
                value: Any, absent: Any) -> None:
        """Queue a statement filling one entry per key: `value(row)` for the rows found, `absent` otherwise."""
        tokens = {k: self.cache.expect((what, k)) for k in keys}

        def fill(rows: list[Row]) -> None:
            found = {key_of(r): r for r in rows}
            for k, token in tokens.items():
                self.cache.fill((what, k), token, value(found[k]) if k in found else absent)

        self.conn.queue(sql, params, fill)

    # ---- locks (storage.md §6.3–§6.4) and the database clock (§7) -----------------------------
    def lock_attempt_authority(self, attempt_id: str) -> None:
        self.conn.queue(f"SELECT pg_advisory_xact_lock({AUTHORITY_KEY.format('%s')})", (attempt_id,))

    def try_lock_attempt_authorities(self, attempt_ids: Sequence[str]) -> bool:
        if not attempt_ids:
            return True
        # One statement; the sorted subquery feeds the try-locks in ascending id order.
        row = self._fetchone(
            f"SELECT bool_and(pg_try_advisory_xact_lock({AUTHORITY_KEY.format('id')})) "
            'FROM (SELECT id FROM unnest(%s::text[]) AS t(id) ORDER BY id COLLATE "C") AS ids',
            (list(attempt_ids),))
        return bool(row and row[0])

    def lock_run(self, run_id: str) -> None:
        self.cache.drop(("active_attempts", run_id))
        key: Key = ("run", run_id)
        token = self.cache.expect(key)
        self.conn.queue(f"SELECT {RUNS.select_list} FROM {RUNS.name} WHERE id = %s FOR UPDATE", (run_id,),
                        lambda rows: self.cache.fill(key, token, RUNS.to_record(rows[0]) if rows else None))
        # Every command that locks a Run loads its admission and reads its last event time next.
        self._ahead(("admissions_of_run", run_id), *self._admissions_of_run_sql(run_id),
                    lambda rows: [codec.admission_row(r) for r in rows])
        self._ahead(("last_event_time", run_id), *self._last_event_time_sql(run_id),
                    lambda rows: codec.bigint(rows[0][0]) if rows else None)

    def lock_step_runs(self, run_id: str, step_run_ids: Sequence[str] | None = None) -> None:
        self.cache.drop(("active_attempts", run_id))
        if step_run_ids is None:
            key: Key = ("steps_of_run", run_id)
            token = self.cache.expect(key)
            self.conn.queue(f"{_STEP_SELECT} WHERE run_id = %s {_STEP_ORDER} FOR UPDATE", (run_id,),
                            lambda rows: self.cache.fill(key, token, [self._stored_step(r) for r in rows]))
            return
        tokens = {i: self.cache.expect(("step", i)) for i in step_run_ids}

        def fill(rows: list[Row]) -> None:
            found = {s.record["id"]: s for s in map(self._stored_step, rows)}
            for i, token in tokens.items():
                if i in found:
                    self.cache.fill(("step", i), token, found[i])
                else:  # not a StepRun of this Run: step_run(id) must still look for it elsewhere
                    self.cache.unfilled(("step", i), token)

        self.conn.queue(f"{_STEP_SELECT} WHERE run_id = %s AND id = ANY(%s) {_STEP_ORDER} FOR UPDATE",
                        (run_id, list(step_run_ids)), fill)

    def lock_attempts(self, attempt_ids: Sequence[str]) -> None:
        self.cache.drop_all("active_attempts")
        if not attempt_ids:
            return
        ids = list(attempt_ids)
        self._by_key("attempt", ids, f'SELECT {ATTEMPTS.select_list} FROM {ATTEMPTS.name} WHERE id = ANY(%s) '
                     'ORDER BY id COLLATE "C" FOR UPDATE', (ids,), lambda r: r[0], ATTEMPTS.to_record, None)
        # Every command that locks attempts checks each one's (immutable) task receipt next.
        if self.conn.pinned_snapshot:
            self._by_key("receipt", ids, f"{_RECEIPT_SELECT} WHERE attempt_id = ANY(%s)", (ids,), lambda r: r[0],
                         codec.receipt_row, None)

    def lock_leases(self, attempt_ids: Sequence[str]) -> None:
        self.cache.drop_all("active_attempts")
        if attempt_ids:
            ids = list(attempt_ids)
            self._by_key("lease", ids, f'SELECT {LEASES.select_list} FROM {LEASES.name} WHERE attempt_id = ANY(%s) '
                         'ORDER BY attempt_id COLLATE "C" FOR UPDATE', (ids,), lambda r: r[0], LEASES.to_record, None)

    def database_time(self) -> int:
        row = self._fetchone(DATABASE_TIME_SQL)
        assert row is not None
        return int(row[0])

    # ---- Runs -----------------------------------------------------------------------------------
    def run(self, run_id: str) -> Record | None:
        cached: Record | None = self.cache.get(("run", run_id))
        if cached is not MISSING:
            return cached
        return self._one(RUNS, "id = %s", (run_id,))

    def run_exists(self, run_id: str) -> bool:
        # admit_workflow asks whether an admission names the Run right after this: one round trip for both.
        self._ahead(("admission_for_run", run_id), *self._admission_for_run_sql(run_id), bool)
        return self._fetchone(f"SELECT 1 FROM {RUNS.name} WHERE id = %s", (run_id,)) is not None

    def insert_run(self, run: Record) -> None:
        self._write(RUNS.insert_sql, RUNS.to_row(run), ("run", run["id"]))

    def cas_run(self, guard: str, old: Record, new: Record) -> None:
        """Run compare-and-set with one of the guards of storage.md §5."""
        self._cas(RUNS.name, guards.run(POSTGRES, guard, old, new), f"Run {old['id']}", ("run", old["id"]))

    # ---- Admissions -----------------------------------------------------------------------------
    @staticmethod
    def _admissions_of_run_sql(run_id: str) -> tuple[str, tuple[Any, ...]]:
        return f'{_ADMISSION_SELECT} WHERE run_id = %s ORDER BY plan_digest COLLATE "C"', (run_id,)

    @staticmethod
    def _admission_for_run_sql(run_id: str) -> tuple[str, tuple[Any, ...]]:
        return f"SELECT 1 FROM {ADMISSIONS_TABLE} WHERE run_id = %s", (run_id,)

    def admissions_of_run(self, run_id: str) -> list[dict[str, Any]]:
        cached: list[dict[str, Any]] = self.cache.get(("admissions_of_run", run_id))
        if cached is not MISSING:
            return cached
        return [codec.admission_row(r) for r in self._fetchall(*self._admissions_of_run_sql(run_id))]

    def admissions_by_plan_id(self, plan_id: str) -> list[dict[str, Any]]:
        rows = self._fetchall(f'{_ADMISSION_SELECT} WHERE plan_id = %s ORDER BY plan_digest COLLATE "C"', (plan_id,))
        return [codec.admission_row(r) for r in rows]

    def admission_for_run_exists(self, run_id: str) -> bool:
        cached = self.cache.get(("admission_for_run", run_id))
        if cached is not MISSING:
            return bool(cached)
        return self._fetchone(*self._admission_for_run_sql(run_id)) is not None

    def insert_admission(self, plan: Record, receipt: Record) -> None:
        row = admission_columns(plan, receipt)
        self._write(codec.insert_sql(ADMISSIONS_TABLE, ADMISSION_COLUMNS, ADMISSION_JSON_COLUMNS),
                    tuple(row[c] for c in ADMISSION_COLUMNS), ("admissions_of_run", plan["runId"]),
                    ("admission_for_run", plan["runId"]))

    def admission_steps(self, plan_digest: str) -> list[Record]:
        rows = self._fetchall(f"SELECT {', '.join(ADMISSION_STEP_COLUMNS)} FROM {ADMISSION_STEPS_TABLE} "
                              'WHERE plan_digest = %s ORDER BY step_key COLLATE "C"', (plan_digest,))
        return [codec.admission_step_record(r) for r in rows]

    def insert_admission_step(self, entry: Record) -> None:
        self._write(codec.insert_sql(ADMISSION_STEPS_TABLE, ADMISSION_STEP_COLUMNS, ("needs_json",)),
                    admission_step_row(entry))

    # ---- StepRuns and the mutation ledger -------------------------------------------------------
    @staticmethod
    def _stored_step(row: Sequence[Any]) -> StoredStepRun:
        return StoredStepRun(STEP_RUNS.to_record(row[:-1]), codec.text(codec.step_run_value(row[-1])))

    def step_run(self, step_run_id: str) -> StoredStepRun | None:
        cached: StoredStepRun | None = self.cache.get(("step", step_run_id))
        if cached is not MISSING:
            return cached
        row = self._fetchone(f"{_STEP_SELECT} WHERE id = %s", (step_run_id,))
        return None if row is None else self._stored_step(row)

    def step_runs_of_run(self, run_id: str) -> list[StoredStepRun]:
        cached: list[StoredStepRun] = self.cache.get(("steps_of_run", run_id))
        if cached is not MISSING:
            return cached
        rows = self._fetchall(f"{_STEP_SELECT} WHERE run_id = %s {_STEP_ORDER}", (run_id,))
        return [self._stored_step(r) for r in rows]

    def existing_step_run_ids(self, ids: list[str]) -> list[str]:
        return [r[0] for r in self._fetchall(f"SELECT id FROM {STEP_RUNS.name} WHERE id = ANY(%s)", (ids,))]

    def insert_step_run(self, step_run: Record) -> None:
        columns = (*STEP_RUNS.columns, "step_run_json")
        self._write(codec.insert_sql(STEP_RUNS.name, columns, ("step_run_json",)),
                    (*STEP_RUNS.to_row(step_run), canonical_text(step_run)), *self._step_keys(step_run))

    def cas_step_run(self, mutation: Record) -> None:
        step = mutation["stepRun"]
        self._cas(STEP_RUNS.name, guards.step_run(POSTGRES, mutation), f"StepRun {step['id']}",
                  *self._step_keys(step))

    @staticmethod
    def _step_keys(step_run: Record) -> tuple[Key, Key]:
        return ("step", step_run["id"]), ("steps_of_run", step_run["runId"])

    def insert_mutation(self, entry: Record) -> None:
        self._write(MUTATIONS.insert_sql, MUTATIONS.to_row(entry))

    def first_ledger_entry(self, step_run_id: str) -> Record | None:
        return self._one(MUTATIONS, f"mutation_id = (SELECT mutation_id FROM {MUTATIONS.name} WHERE step_run_id = %s "
                                    "ORDER BY (step_run_json ->> 'version')::bigint LIMIT 1)", (step_run_id,))

    # ---- Events -----------------------------------------------------------------------------------
    def insert_event(self, event: Record) -> None:
        self._write(EVENTS.insert_sql, EVENTS.to_row(event), ("last_event_time", event["runId"]))

    def events_up_to(self, run_id: str, sequence: int) -> list[Record]:
        return self._all(EVENTS, "run_id = %s AND sequence <= %s", (run_id, sequence), "sequence")

    @staticmethod
    def _last_event_time_sql(run_id: str) -> tuple[str, tuple[Any, ...]]:
        return (f"SELECT created_at_ms FROM {EVENTS.name} WHERE run_id = %s ORDER BY sequence DESC LIMIT 1",
                (run_id,))

    def last_event_time(self, run_id: str) -> int | None:
        cached: int | None = self.cache.get(("last_event_time", run_id))
        if cached is not MISSING:
            return cached
        row = self._fetchone(*self._last_event_time_sql(run_id))
        return None if row is None else codec.bigint(row[0])

    def timeout_requested(self, run_id: str, attempt_id: str) -> bool:
        return self._fetchone(f"SELECT 1 FROM {EVENTS.name} WHERE run_id = %s AND attempt_id = %s "
                              "AND type = 'workflow.task_timeout_requested' LIMIT 1", (run_id, attempt_id)) is not None

    # ---- Attempts, receipts, leases ---------------------------------------------------------------
    def attempt(self, attempt_id: str) -> Record | None:
        cached: Record | None = self.cache.get(("attempt", attempt_id))
        if cached is not MISSING:
            return cached
        return self._one(ATTEMPTS, "id = %s", (attempt_id,))

    def active_attempts_of_run(self, run_id: str) -> list[Record]:
        # Convergence reads them before its locks, again after them (storage.md §6.3: the set it locked
        # must still cover them), and once more to converge. The second read always goes to the
        # database (every lock drops the entry); the third, with no lock or write in between, is the
        # second's answer while one snapshot is read.
        key: Key = ("active_attempts", run_id)
        cached: list[Record] = self.cache.get(key)
        if cached is not MISSING:
            return cached
        found = self._all(ATTEMPTS, f"run_id = %s AND status IN {ACTIVE_SQL}", (run_id,), 'id COLLATE "C"')
        if self.conn.pinned_snapshot:
            self.cache.fill(key, self.cache.expect(key), found)
        return found

    @staticmethod
    def _max_attempt_number_sql(run_id: str) -> tuple[str, tuple[Any, ...]]:
        return f"SELECT COALESCE(MAX(attempt), 0) FROM {ATTEMPTS.name} WHERE run_id = %s", (run_id,)

    def max_attempt_number(self, run_id: str) -> int:
        cached = self.cache.get(("max_attempt_number", run_id))
        if cached is not MISSING:
            return int(cached)
        row = self._fetchone(*self._max_attempt_number_sql(run_id))
        assert row is not None
        return int(row[0])

    def insert_attempt(self, attempt: Record) -> None:
        self._write(ATTEMPTS.insert_sql, ATTEMPTS.to_row(attempt), *self._attempt_keys(attempt),
                    ("max_attempt_number", attempt["runId"]))

    def cas_attempt(self, old: Record, new: Record) -> None:
        self._cas(ATTEMPTS.name, guards.attempt(POSTGRES, old, new), f"attempt {old['id']}", *self._attempt_keys(old))

    def cas_attempt_convergence(self, old: Record, new: Record) -> None:
        self._cas(ATTEMPTS.name, guards.attempt_convergence(POSTGRES, old, new), f"attempt {old['id']}",
                  *self._attempt_keys(old))

    @staticmethod
    def _attempt_keys(attempt: Record) -> tuple[Key, Key]:
        return ("attempt", attempt["id"]), ("active_attempts", attempt["runId"])

    def receipt_row(self, attempt_id: str) -> dict[str, Any] | None:
        cached: dict[str, Any] | None = self.cache.get(("receipt", attempt_id))
        if cached is not MISSING:
            return cached
        row = self._fetchone(f"{_RECEIPT_SELECT} WHERE attempt_id = %s", (attempt_id,))
        return None if row is None else codec.receipt_row(row)

    def receipt_for_epoch(self, run_id: str, step_run_id: str, version: int) -> dict[str, Any] | None:
        # admit_task_attempt reads the Run's highest attempt number right after: one round trip for both.
        self._ahead(("max_attempt_number", run_id), *self._max_attempt_number_sql(run_id), lambda rows: rows[0][0])
        row = self._fetchone(f"{_RECEIPT_SELECT} WHERE run_id = %s AND step_run_id = %s AND step_run_version = %s",
                             (run_id, step_run_id, version))
        return None if row is None else codec.receipt_row(row)

    def insert_receipt(self, receipt: Record, plan: Record) -> None:
        row = codec.receipt_columns(receipt, plan)
        self._write(codec.insert_sql(TASK_RECEIPTS_TABLE, tuple(row), ("receipt_json",)), tuple(row.values()),
                    ("receipt", receipt["attemptId"]))

    def lease(self, attempt_id: str) -> Record | None:
        cached: Record | None = self.cache.get(("lease", attempt_id))
        if cached is not MISSING:
            return cached
        return self._one(LEASES, "attempt_id = %s", (attempt_id,))

    def insert_lease(self, lease: Record) -> None:
        self._write(LEASES.insert_sql, LEASES.to_row(lease), ("lease", lease["attemptId"]))

    def cas_lease(self, old: Record, new: Record) -> None:
        self._cas(LEASES.name, guards.lease(POSTGRES, old, new), f"lease {old['attemptId']}",
                  ("lease", old["attemptId"]))
