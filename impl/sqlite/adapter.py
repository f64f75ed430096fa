"""The SQLite backend of the command port (storage.md §6.1, "Edge/Standalone").

One connection per database, owned by an operation authority (FIFO, bounded, closable). Argument
shapes are validated before an operation is queued. Every writing command runs in one
`BEGIN IMMEDIATE` transaction, reads the clock once inside it, COMMITs on every success path
(replays and no-op answers included) and ROLLBACKs on any error. converge_cancellation_page scans
without a transaction, then converges each workflow in its own transaction (D-6).

The dispatch, the transaction template, the queries and the page are `qlwf.impl.sql_adapter`'s;
check sequences and effects are the shared command logic (`qlwf.impl.commands`) over a
`SqliteStore`. This module is the dialect: the authority, BEGIN IMMEDIATE, the error mapping
(nothing is retried: the one writer cannot lose a race), the queries module and the snapshot reader.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from qlwf.impl.port import Clock, Record, Snapshot
from qlwf.impl.sql_adapter import Observer, SqlAdapter
from qlwf.model.errors import CommandErrors, QlwfError

from . import drift_injection, queries
from .authority import OperationAuthority
from .failures import map_storage_error
from .memory import MemoryStorePool, open_memory_database
from .migrations import open_database
from .snapshot import SnapshotReader
from .store import SqliteStore


class SqliteAdapter(SqlAdapter):
    """The command port over one SQLite database (a file path or ":memory:")."""

    queries = queries
    storage_errors = (sqlite3.Error,)

    def __init__(self, path: str | os.PathLike[str] = ":memory:", clock: Clock | None = None,
                 store_factory: Callable[[sqlite3.Connection], SqliteStore] = SqliteStore, *,
                 observer: Observer | None = None, pool: MemoryStorePool | None = None) -> None:
        super().__init__(clock, observer)
        memory = os.fspath(path) == ":memory:"
        if pool is not None and not memory:
            raise ValueError("only a private in-memory store comes from a MemoryStorePool")
        # A private in-memory store is cloned from a migrated template (or an emptied one taken from
        # `pool`, decisions Q-63); anything else is migrated.
        self._pool = pool
        self._conn = pool.acquire() if pool is not None else open_memory_database() if memory else open_database(path)
        self._store = store_factory(self._conn)
        self._authority = OperationAuthority()
        self._reader = SnapshotReader()

    def close(self) -> None:
        if self._authority.closed:
            return
        self._authority.close()
        if self._pool is not None:
            self._pool.release(self._conn)
        else:
            self._conn.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The single connection (tests and diagnostics only; never use it while a command runs).

        A connection handed out here never goes back to a pool: its user may have registered
        functions or changed settings that the pool's check cannot read back."""
        self._pool = None
        return self._conn

    # ---- the dialect ------------------------------------------------------------------------------
    def _operation(self, fail: CommandErrors) -> contextlib.AbstractContextManager[None]:
        return self._authority.operation(fail)

    @contextlib.contextmanager
    def _connection(self, fail: CommandErrors) -> Iterator[sqlite3.Connection]:
        yield self._conn  # held by the authority for the whole operation

    def _store_for(self, conn: sqlite3.Connection) -> SqliteStore:
        return self._store

    def _begin(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")  # the write lock first: the clock is read under it

    def _rollback(self, conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):  # the original error is what gets reported
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _map_storage_error(self, fail: CommandErrors, error: BaseException) -> QlwfError:
        return map_storage_error(fail, error)

    def _database_time(self, conn: sqlite3.Connection) -> Callable[[], int]:
        return self._store.database_time

    def _read_snapshot(self, conn: sqlite3.Connection, kinds: frozenset[str] | None = None) -> Snapshot:
        return self._reader(conn, kinds)

    def _corrupt(self, conn: sqlite3.Connection, kind: str, key: list[Any], patch: Record) -> None:
        drift_injection.corrupt(conn, kind, key, patch)
