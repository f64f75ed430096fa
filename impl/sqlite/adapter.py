"""The SQLite backend of the command port (storage.md §6.1, "Edge/Standalone").

One connection per database, owned by an operation authority (FIFO, bounded, closable). Argument
shapes are validated before an operation is queued. Every writing command runs in one
`BEGIN IMMEDIATE` transaction, reads the clock once inside it, COMMITs on every success path
(replays and no-op answers included) and ROLLBACKs on any error. converge_cancellation_page scans
without a transaction, then converges each workflow in its own transaction (D-6).

Check sequences and effects are the shared command logic (`qlwf.impl.commands`) over a
`SqliteStore`; this package owns the SQL, the transaction discipline, the candidate queries and the
error mapping.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from typing import Any

from qlwf.impl.commands import arguments
from qlwf.impl.commands.failures import ConcurrentChange, Failures
from qlwf.impl.commands.pages import assemble_page, page_result, workflow_outcome
from qlwf.impl.commands.registry import CONVERGE, WRITING_COMMANDS, WritingCommand, run_command
from qlwf.impl.port import Clock, CommandPort, FixedClock, Record, Snapshot
from qlwf.model.errors import QlwfError

from . import faults, queries
from .authority import OperationAuthority
from .failures import map_storage_error
from .memory import open_memory_database
from .migrations import open_database
from .snapshot import JsonMemo, read_snapshot
from .store import SqliteStore


class SqliteAdapter(CommandPort):
    """The command port over one SQLite database (a file path or ":memory:")."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:", clock: Clock | None = None,
                 store_factory: Callable[[sqlite3.Connection], SqliteStore] = SqliteStore) -> None:
        self.clock = clock if clock is not None else FixedClock()
        # A private in-memory store is cloned from a migrated template; anything else is migrated.
        self._conn = open_memory_database() if os.fspath(path) == ":memory:" else open_database(path)
        self._store = store_factory(self._conn)
        self._authority = OperationAuthority()
        self._json_memo = JsonMemo()

    # ---- the port -------------------------------------------------------------------------------
    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        if name not in WRITING_COMMANDS and name not in queries.QUERIES and name != "converge_cancellation_page":
            raise ValueError(f"not a command: {name!r}")
        fail = Failures(name)
        self.set_step_time(now)
        if name in WRITING_COMMANDS:
            command = WRITING_COMMANDS[name]
            prepared = command.prepare(fail, args)  # Invalid before the operation is queued
            with self._authority.operation(fail):
                return self._transaction(fail, command, prepared)
        query = "cancellation_candidates" if name == "converge_cancellation_page" else name
        limit, after = arguments.page(fail, args, query)
        with self._authority.operation(fail):
            if name == "converge_cancellation_page":
                return self._converge_page(fail, limit, after)
            return self._query(fail, name, limit, after)

    def snapshot(self) -> Snapshot:
        with self._authority.operation(Failures("cancellation_candidates")):
            return read_snapshot(self._conn, self._json_memo)

    def corrupt(self, kind: str, key: list[Any], patch: Record) -> None:
        """FaultInjection: overwrite one stored record (drift traces only)."""
        with self._authority.operation(Failures("cancellation_candidates")):
            faults.corrupt(self._conn, kind, key, patch)

    def close(self) -> None:
        if self._authority.closed:
            return
        self._authority.close()
        self._conn.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The single connection (tests and diagnostics only; never use it while a command runs)."""
        return self._conn

    # ---- transactions ---------------------------------------------------------------------------
    def _transaction(self, fail: Failures, command: WritingCommand, prepared: Any) -> Record:
        """BEGIN IMMEDIATE … COMMIT; the clock is read once, under the write lock."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise map_storage_error(fail, e) from e
        try:
            result = run_command(self._store, fail, self.clock, command, prepared)
            conn.execute("COMMIT")
            return result
        except ConcurrentChange as e:
            self._rollback()
            raise fail.conflict("concurrent_change", f"{e} changed concurrently") from e
        except (QlwfError, sqlite3.Error) as e:
            self._rollback()
            raise map_storage_error(fail, e) from e
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # the original error is what gets reported
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")

    # ---- queries and the convergence page -------------------------------------------------------
    def _query(self, fail: Failures, name: str, limit: int, after: tuple[Any, ...] | None) -> Record:
        try:
            if name == "recovery_candidates":
                now = self.clock.read(self._store.database_time)
                rows = queries.recovery_rows(self._conn, after, limit, fail, now)
            else:
                rows = queries.QUERIES[name](self._conn, after, limit, fail)
        except sqlite3.Error as e:
            raise map_storage_error(fail, e) from e
        return page_result(name, rows, limit)

    def _converge_page(self, fail: Failures, limit: int, after: tuple[Any, ...] | None) -> Record:
        """commands.md §4.18: scan, then one transaction per workflow; a workflow's error never fails the page."""
        try:
            rows = queries.cancellation_rows(self._conn, after, limit, fail)
        except (sqlite3.Error, QlwfError) as e:
            raise fail.unavailable("scan_failed", str(e)) from e
        outcomes = []
        workflow = Failures("converge_cancellation")
        for row in rows[:limit]:
            try:
                result = self._transaction(workflow, CONVERGE, {"runId": row["runId"]})
            except QlwfError as e:
                outcomes.append(workflow_outcome(row["runId"], error=e))
                continue
            outcomes.append(workflow_outcome(row["runId"], result))
        try:
            has_more = queries.any_cancellation_candidate(self._conn)
        except sqlite3.Error as e:
            raise map_storage_error(fail, e) from e
        return assemble_page(limit, rows, outcomes, has_more)
