"""The PostgreSQL backend of the command port (storage.md §6.2–§6.4, "Cluster").

Every writing command, and each per-workflow transaction of the convergence page, takes a pooled
connection and runs `BEGIN ISOLATION LEVEL SERIALIZABLE` with transaction-local statement, lock and
idle timeouts; takes the locks of storage.md §6.3 in the global order; reads the clock once, after
the Run row lock (§7); runs the shared command logic; and COMMITs on every success path. A try that
fails with SQLSTATE 40001, 40P01 or 55P03 is rolled back and the whole command re-run on a fresh
pooled connection, re-reading everything including the clock; after 3 tries the command fails with
Unavailable `retry_exhausted`. Queries are single statements outside any transaction block.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from qlwf.impl.commands import arguments
from qlwf.impl.commands.failures import ConcurrentChange, Failures
from qlwf.impl.commands.pages import assemble_page, page_result, workflow_outcome
from qlwf.impl.commands.registry import CONVERGE, WRITING_COMMANDS, WritingCommand, run_command
from qlwf.impl.port import Clock, CommandPort, FixedClock, Record, Snapshot
from qlwf.model.errors import QlwfError

from . import faults, queries
from .database import ConnectionUnavailable, PgDatabase
from .failures import RETRYABLE, Retryable, map_storage_error, sqlstate
from .snapshot import read_snapshot
from .store import PgStore

MAX_TRIES = 3
# storage.md §6.2: transaction-local limits, set right after BEGIN in the same round trip.
TRANSACTION_LIMITS = ("SET LOCAL statement_timeout = 5000; SET LOCAL lock_timeout = 1000; "
                      "SET LOCAL idle_in_transaction_session_timeout = 10000")
# storage.md §7: queries (recovery_candidates) read the statement timestamp.
STATEMENT_TIME_SQL = "SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"


@dataclass(frozen=True)
class TransactionLog:
    """The final outcome of one writing transaction, for harnesses that replay committed history.

    `now` is the observation time the final try read (None when it failed before reading the
    clock); pages report one entry per workflow, named converge_cancellation.
    """

    name: str
    args: Any
    outcome: Record  # {"ok": result} or {"error": {class, code, reason}}
    now: int | None
    # The connection died after COMMIT was sent: the transaction may or may not have committed, and
    # the caller must find out from durable state (a lost commit response).
    ambiguous: bool = False


@dataclass
class PgStats:
    """Transaction counters of one adapter (thread-safe)."""

    commits: int = 0
    failures: int = 0  # writing transactions that ended in an error (after their last try)
    retries: Counter[str] = field(default_factory=Counter)  # re-runs by SQLSTATE
    exhausted: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def retried(self, state: str) -> None:
        with self._lock:
            self.retries[state] += 1


Observer = Callable[[TransactionLog], None]


class PostgresAdapter(CommandPort):
    """The command port over one PostgreSQL database holding the ql3 schema."""

    def __init__(self, database: PgDatabase | str, clock: Clock | None = None, *,
                 store_factory: Callable[[psycopg.Connection[Any]], PgStore] = PgStore,
                 isolation: str = "SERIALIZABLE", max_tries: int = MAX_TRIES, pool_size: int = 2,
                 observer: Observer | None = None) -> None:
        self.clock = clock if clock is not None else FixedClock()
        self._owns_database = isinstance(database, str)
        self.database = PgDatabase(database, size=pool_size) if isinstance(database, str) else database
        self._store_factory = store_factory
        self._begin = f"BEGIN ISOLATION LEVEL {isolation}; {TRANSACTION_LIMITS}"
        self.max_tries = max_tries
        self.observer = observer
        self.stats = PgStats()
        self._closed = False

    # ---- the port -------------------------------------------------------------------------------
    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        if name not in WRITING_COMMANDS and name not in queries.QUERIES and name != "converge_cancellation_page":
            raise ValueError(f"not a command: {name!r}")
        fail = Failures(name)
        self.set_step_time(now)
        if name in WRITING_COMMANDS:
            command = WRITING_COMMANDS[name]
            prepared = command.prepare(fail, args)  # Invalid before any storage work
            self._check_open(fail)
            return self._transaction(fail, command, args, prepared)
        query = "cancellation_candidates" if name == "converge_cancellation_page" else name
        limit, after = arguments.page(fail, args, query)
        self._check_open(fail)
        if name == "converge_cancellation_page":
            return self._converge_page(fail, limit, after)
        return self._query(fail, name, limit, after)

    def snapshot(self) -> Snapshot:
        fail = Failures("cancellation_candidates")
        self._check_open(fail)
        with self._connection(fail) as conn:
            return read_snapshot(conn)

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        """FaultInjection: overwrite one stored record (drift traces only)."""
        fail = Failures("cancellation_candidates")
        self._check_open(fail)
        with self._connection(fail) as conn:
            faults.corrupt(conn, kind, key, patch)
        self.database.mark_checks_invalidated()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_database:
            self.database.close()

    # ---- connections ------------------------------------------------------------------------------
    def _check_open(self, fail: Failures) -> None:
        if self._closed:
            raise fail.unavailable("storage_closed", "the PostgreSQL adapter is closed")

    @contextlib.contextmanager
    def _connection(self, fail: Failures) -> Any:
        try:
            conn = self.database.getconn()
        except ConnectionUnavailable as e:
            raise fail.unavailable("storage_unreachable", str(e)) from e
        try:
            yield conn
        finally:
            self.database.putconn(conn)

    # ---- writing transactions ---------------------------------------------------------------------
    def _transaction(self, fail: Failures, command: WritingCommand, args: Any, prepared: Any) -> Record:
        for attempt in range(1, self.max_tries + 1):
            now: list[int] = []
            lost: list[bool] = []
            try:
                result = self._try(fail, command, prepared, now.append, lost)
            except Retryable as e:
                self.stats.retried(e.sqlstate)
                if attempt < self.max_tries:
                    time.sleep(random.uniform(0, 0.002 * attempt))  # de-synchronize retrying competitors
                continue
            except QlwfError as e:
                self.stats.add("failures")
                self._observe(fail.command, args, {"error": e.to_json()}, now, ambiguous=bool(lost))
                raise
            self.stats.add("commits")
            self._observe(fail.command, args, {"ok": result}, now)
            return result
        self.stats.add("exhausted")
        self.stats.add("failures")
        error = fail.unavailable("retry_exhausted", f"{self.max_tries} tries hit a lock, deadlock or serialization "
                                                    "failure")
        self._observe(fail.command, args, {"error": error.to_json()}, [])
        raise error

    def _try(self, fail: Failures, command: WritingCommand, prepared: Any, on_now: Callable[[int], None],
             lost: list[bool]) -> Record:
        """One try; appends to `lost` when the connection broke after COMMIT was sent (outcome unknown)."""
        with self._connection(fail) as conn:
            committing = False
            try:
                conn.execute(self._begin)
                result = run_command(self._store_factory(conn), fail, self.clock, command, prepared, on_now)
                committing = True
                conn.execute("COMMIT")
                return result
            except BaseException as e:
                if committing and conn.broken:
                    lost.append(True)
                _rollback(conn)
                if isinstance(e, ConcurrentChange):
                    raise fail.conflict("concurrent_change", f"{e} changed concurrently") from e
                if isinstance(e, psycopg.Error):
                    state = sqlstate(e)
                    if state in RETRYABLE:
                        raise Retryable(state or "", e) from e
                    raise map_storage_error(fail, e) from e
                raise

    def _observe(self, name: str, args: Any, outcome: Record, now: list[int], *, ambiguous: bool = False) -> None:
        if self.observer is not None:
            self.observer(TransactionLog(name, args, outcome, now[-1] if now else None, ambiguous))

    # ---- queries and the convergence page -------------------------------------------------------
    def _query(self, fail: Failures, name: str, limit: int, after: tuple[Any, ...] | None) -> Record:
        with self._connection(fail) as conn:
            try:
                if name == "recovery_candidates":
                    now = self.clock.read(lambda: _statement_time(conn))
                    rows = queries.recovery_rows(conn, after, limit, fail, now)
                else:
                    rows = queries.QUERIES[name](conn, after, limit, fail)
            except psycopg.Error as e:
                raise map_storage_error(fail, e) from e
        return page_result(name, rows, limit)

    def _converge_page(self, fail: Failures, limit: int, after: tuple[Any, ...] | None) -> Record:
        """commands.md §4.18: scan, then one transaction per workflow; a workflow's error never fails the page."""
        try:
            with self._connection(fail) as conn:
                rows = queries.cancellation_rows(conn, after, limit, fail)
        except (psycopg.Error, QlwfError) as e:
            raise fail.unavailable("scan_failed", str(e)) from e
        outcomes = []
        workflow = Failures("converge_cancellation")
        for row in rows[:limit]:
            args = {"runId": row["runId"]}
            try:
                result = self._transaction(workflow, CONVERGE, args, args)
            except QlwfError as e:
                outcomes.append(workflow_outcome(row["runId"], error=e))
                continue
            outcomes.append(workflow_outcome(row["runId"], result))
        with self._connection(fail) as conn:
            try:
                has_more = queries.any_cancellation_candidate(conn)
            except psycopg.Error as e:
                raise map_storage_error(fail, e) from e
        return assemble_page(limit, rows, outcomes, has_more)


def _rollback(conn: psycopg.Connection[Any]) -> None:
    """Roll back whatever is open; an error of the rollback itself is swallowed (the original error
    is what gets reported) and a broken connection is discarded by the pool."""
    with contextlib.suppress(psycopg.Error):
        if conn.info.transaction_status != TransactionStatus.IDLE:
            conn.execute("ROLLBACK")


def _statement_time(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(STATEMENT_TIME_SQL).fetchone()
    assert row is not None
    return int(row[0])
