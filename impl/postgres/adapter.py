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

The "connection" the template hands around is a `PgSession` (session.py): BEGIN and its SET LOCALs
are queued and go out with the try's first statements, the store queues its locks and writes, and
COMMIT goes out with the deferred writes, so a command costs two to four round trips instead of one
per statement (docs/decisions.md Q-62). A retryable error may now surface from any of those round
trips, COMMIT's included; the template retries it wherever it comes from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from qlwf.impl.port import Clock, Record, Snapshot
from qlwf.impl.sql_adapter import MAX_TRIES, Observer, SqlAdapter, TransactionLog
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors, QlwfError

from . import drift_injection, queries
from .database import ConnectionUnavailable, PgDatabase
from .failures import RETRYABLE, map_storage_error, sqlstate
from .session import Boundaries, PgSession, WireStats
from .snapshot import RowMemo, read_snapshot
from .store import PgStore

__all__ = ["MAX_TRIES", "Observer", "PostgresAdapter", "TransactionLog"]

# storage.md §6.2: transaction-local limits (records.md §2.3), set right after BEGIN in the same round trip.
SET_LOCAL_LIMITS = (f"SET LOCAL statement_timeout = {T.PG_STATEMENT_TIMEOUT_MS}",
                    f"SET LOCAL lock_timeout = {T.PG_LOCK_TIMEOUT_MS}",
                    f"SET LOCAL idle_in_transaction_session_timeout = {T.PG_IDLE_IN_TRANSACTION_TIMEOUT_MS}")
TRANSACTION_LIMITS = "; ".join(SET_LOCAL_LIMITS)  # the same limits as one script (bench/bench_postgres.py)
# Isolation levels that read one snapshot per transaction: reads may be sent ahead of their use (session.py).
_PINNED = frozenset({"SERIALIZABLE", "REPEATABLE READ"})
# storage.md §7: queries (recovery_candidates) read the statement timestamp.
STATEMENT_TIME_SQL = "SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint"


class PostgresAdapter(SqlAdapter):
    """The command port over one PostgreSQL database holding the ql3 schema."""

    queries = queries
    storage_errors = (psycopg.Error,)

    def __init__(self, database: PgDatabase | str, clock: Clock | None = None, *,
                 store_factory: Callable[[PgSession], PgStore] = PgStore,
                 isolation: str = "SERIALIZABLE", max_tries: int = MAX_TRIES, pool_size: int = 2,
                 observer: Observer | None = None) -> None:
        super().__init__(clock, observer)
        self._owns_database = isinstance(database, str)
        self.database = PgDatabase(database, size=pool_size) if isinstance(database, str) else database
        self._store_factory = store_factory
        self._begin_sql = f"BEGIN ISOLATION LEVEL {isolation}"
        self._pinned = isolation.upper() in _PINNED
        self.max_tries = max_tries
        self.wire = WireStats()  # round trips and statements per command name
        self._rows = RowMemo()  # read-back records by their exact rows (snapshot.py)
        self._closed = False

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        with self.wire.command(name):
            return super().execute(name, args, now)

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
    def _connection(self, fail: CommandErrors) -> Iterator[PgSession]:
        try:
            conn = self.database.getconn()
        except ConnectionUnavailable as e:
            raise fail.unavailable("storage_unreachable", str(e)) from e
        try:
            yield PgSession(conn, self.wire, self._boundaries(), pinned_snapshot=self._pinned)
        finally:
            self.database.putconn(conn)

    def _boundaries(self) -> Boundaries | None:
        """What sees every statement before it is sent (the crash harness); nothing by default."""
        return None

    def _store_for(self, conn: PgSession) -> PgStore:
        return self._store_factory(conn)

    def _begin(self, conn: PgSession) -> None:
        """Queued: BEGIN and the limits go out with the try's first statements."""
        conn.queue(self._begin_sql)
        for limit in SET_LOCAL_LIMITS:
            conn.queue(limit)

    def _commit(self, conn: PgSession) -> None:
        conn.commit()  # the deferred writes and COMMIT, one round trip

    def _rollback(self, conn: PgSession) -> None:
        """A broken connection is discarded by the pool."""
        conn.rollback()

    def _retry_code(self, error: BaseException) -> str | None:
        state = sqlstate(error)
        return state if state in RETRYABLE else None

    def _commit_lost(self, conn: PgSession) -> bool:
        return bool(conn.conn.broken)

    def _map_storage_error(self, fail: CommandErrors, error: BaseException) -> QlwfError:
        return map_storage_error(fail, error)

    def _database_time(self, conn: PgSession) -> Callable[[], int]:
        return lambda: _statement_time(conn)

    def _read_snapshot(self, conn: PgSession, kinds: frozenset[str] | None = None) -> Snapshot:
        return read_snapshot(conn, kinds, self._rows)

    def _corrupt(self, conn: PgSession, kind: str, key: list[Any], patch: Record) -> None:
        drift_injection.corrupt(conn.conn, kind, key, patch)


def _statement_time(conn: PgSession) -> int:
    row = conn.fetchone(STATEMENT_TIME_SQL)
    assert row is not None
    return int(row[0])
