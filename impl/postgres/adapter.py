"""The PostgreSQL backend of the command port (storage.md §6.2–§6.4, "Cluster").

Every writing command, and each per-workflow transaction of the convergence page, takes a pooled
connection and runs `BEGIN ISOLATION LEVEL SERIALIZABLE` with transaction-local statement, lock and
idle timeouts; takes the locks of storage.md §6.3 in the global order; reads the clock once, after
the Run row lock (§7); runs the shared command logic; and COMMITs on every success path. A try that
fails with SQLSTATE 40001, 40P01 or 55P03 is rolled back and the whole command re-run on a fresh
pooled connection, re-reading everything including the clock; after 3 tries the command fails with
Unavailable `retry_exhausted`. Queries are single statements outside any transaction block.

The dispatch, the transaction template with its retries, the queries and the page are
`qlwf.impl.sql_adapter`'s; this module is the dialect: the pool, the BEGIN with its limits, the
retryable SQLSTATEs, the error mapping, the queries module and the snapshot reader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from qlwf.impl.port import Clock, Record, Snapshot
from qlwf.impl.sql_adapter import MAX_TRIES, Observer, SqlAdapter, TransactionLog
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors, QlwfError

from . import drift_injection, queries
from .database import ConnectionUnavailable, PgDatabase
from .failures import RETRYABLE, map_storage_error, sqlstate
from .snapshot import read_snapshot
from .store import PgStore

__all__ = ["MAX_TRIES", "Observer", "PostgresAdapter", "TransactionLog"]

# storage.md §6.2: transaction-local limits (records.md §2.3), set right after BEGIN in the same round trip.
TRANSACTION_LIMITS = (f"SET LOCAL statement_timeout = {T.PG_STATEMENT_TIMEOUT_MS}; "
                      f"SET LOCAL lock_timeout = {T.PG_LOCK_TIMEOUT_MS}; "
                      f"SET LOCAL idle_in_transaction_session_timeout = {T.PG_IDLE_IN_TRANSACTION_TIMEOUT_MS}")
# storage.md §7: queries (recovery_candidates) read the statement timestamp.
STATEMENT_TIME_SQL = "SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"


class PostgresAdapter(SqlAdapter):
    """The command port over one PostgreSQL database holding the ql3 schema."""

    queries = queries
    storage_errors = (psycopg.Error,)

    def __init__(self, database: PgDatabase | str, clock: Clock | None = None, *,
                 store_factory: Callable[[psycopg.Connection[Any]], PgStore] = PgStore,
                 isolation: str = "SERIALIZABLE", max_tries: int = MAX_TRIES, pool_size: int = 2,
                 observer: Observer | None = None) -> None:
        super().__init__(clock, observer)
        self._owns_database = isinstance(database, str)
        self.database = PgDatabase(database, size=pool_size) if isinstance(database, str) else database
        self._store_factory = store_factory
        self._begin_sql = f"BEGIN ISOLATION LEVEL {isolation}; {TRANSACTION_LIMITS}"
        self.max_tries = max_tries
        self._closed = False

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        super().corrupt(kind, key, patch)
        self.database.mark_checks_invalidated()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_database:
            self.database.close()

    # ---- the dialect ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _operation(self, fail: CommandErrors) -> Iterator[None]:
        if self._closed:
            raise fail.unavailable("storage_closed", "the PostgreSQL adapter is closed")
        yield

    @contextlib.contextmanager
    def _connection(self, fail: CommandErrors) -> Iterator[Any]:
        try:
            conn = self.database.getconn()
        except ConnectionUnavailable as e:
            raise fail.unavailable("storage_unreachable", str(e)) from e
        try:
            yield conn
        finally:
            self.database.putconn(conn)

    def _store_for(self, conn: psycopg.Connection[Any]) -> PgStore:
        return self._store_factory(conn)

    def _begin(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(self._begin_sql)

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        """A broken connection is discarded by the pool."""
        with contextlib.suppress(psycopg.Error):
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")

    def _retry_code(self, error: BaseException) -> str | None:
        state = sqlstate(error)
        return state if state in RETRYABLE else None

    def _commit_lost(self, conn: psycopg.Connection[Any]) -> bool:
        return bool(conn.broken)

    def _map_storage_error(self, fail: CommandErrors, error: BaseException) -> QlwfError:
        return map_storage_error(fail, error)

    def _database_time(self, conn: psycopg.Connection[Any]) -> Callable[[], int]:
        return lambda: _statement_time(conn)

    def _read_snapshot(self, conn: psycopg.Connection[Any], kinds: frozenset[str] | None = None) -> Snapshot:
        return read_snapshot(conn, kinds)

    def _corrupt(self, conn: psycopg.Connection[Any], kind: str, key: list[Any], patch: Record) -> None:
        drift_injection.corrupt(conn, kind, key, patch)


def _statement_time(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(STATEMENT_TIME_SQL).fetchone()
    assert row is not None
    return int(row[0])
