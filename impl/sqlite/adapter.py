"""The SQLite backend of the command port (storage.md §6.1, "Edge/Standalone").

One connection per database, owned by an operation authority (FIFO, bounded, closable). Argument
shapes are validated before an operation is queued. Every writing command runs in one
`BEGIN IMMEDIATE` transaction, reads the clock once inside it, COMMITs on every success path
(replays and no-op answers included) and ROLLBACKs on any error. converge_cancellation_page scans
without a transaction, then converges each workflow in its own transaction (D-6).

Decisions are the model's pure functions; this package owns the SQL, the locking, the candidate
queries, the integrity loads and the error mapping.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from qlwf.impl.port import Clock, CommandPort, FixedClock, Record, Snapshot
from qlwf.model.cancellation import accumulate_page, check_page_result, page_outcome
from qlwf.model.errors import Conflict, QlwfError

from . import arguments, cmd_admission, cmd_cancel, cmd_frontier, cmd_recovery, cmd_tasks, cmd_worker, faults, queries
from .authority import OperationAuthority
from .context import Tx
from .failures import ConcurrentChange, Failures
from .loads import Loads
from .memory import open_memory_database
from .migrations import open_database
from .snapshot import JsonMemo, read_snapshot
from .store import SqliteStore

R = TypeVar("R")

# storage.md §7: the sub-second Unix epoch in milliseconds, truncated (julianday keeps the fraction
# on SQLite builds that predate unixepoch('subsec')).
DATABASE_TIME_SQL = "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@dataclass(frozen=True)
class WritingCommand:
    prepare: Callable[[Failures, Any], Any]
    run: Callable[[Tx, Any], Record]


def _worker(name: str) -> WritingCommand:
    return WritingCommand(cmd_worker.prepare, cmd_worker.COMMANDS[name])


WRITING_COMMANDS: dict[str, WritingCommand] = {
    "admit_workflow": WritingCommand(cmd_admission.prepare, cmd_admission.run),
    "advance_frontier": WritingCommand(cmd_frontier.prepare, cmd_frontier.run),
    "admit_task_attempt": WritingCommand(cmd_tasks.prepare, cmd_tasks.run),
    **{name: _worker(name) for name in cmd_worker.COMMANDS},
    "recover_attempt": WritingCommand(cmd_recovery.prepare, cmd_recovery.run),
    "request_cancel": WritingCommand(cmd_cancel.prepare_request, cmd_cancel.request_cancel),
    "converge_cancellation": WritingCommand(cmd_cancel.prepare_converge, cmd_cancel.converge_cancellation),
}


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
                return self._transaction(fail, lambda tx: command.run(tx, prepared))
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
    def _database_time(self) -> int:
        (ms,) = self._conn.execute(DATABASE_TIME_SQL).fetchone()
        return int(ms)

    def _transaction(self, fail: Failures, body: Callable[[Tx], R]) -> R:
        """BEGIN IMMEDIATE … COMMIT; the clock is read once, under the write lock."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise fail.map_storage_error(e) from e
        try:
            now = self.clock.read(self._database_time)
            result = body(Tx(self._store, Loads(self._store, fail), fail, now))
            conn.execute("COMMIT")
            return result
        except ConcurrentChange as e:
            self._rollback()
            raise fail.conflict("concurrent_change", f"{e} changed concurrently") from e
        except (QlwfError, sqlite3.Error) as e:
            self._rollback()
            raise fail.map_storage_error(e) from e
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
                now = self.clock.read(self._database_time)
                rows = queries.recovery_rows(self._conn, after, limit, fail, now)
            else:
                rows = queries.QUERIES[name](self._conn, after, limit, fail)
        except sqlite3.Error as e:
            raise fail.map_storage_error(e) from e
        return queries.page_result(name, rows, limit)

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
                result = self._transaction(workflow, lambda tx, run_id=row["runId"]: cmd_cancel.converge(tx, run_id))
            except QlwfError as e:
                if isinstance(e, Conflict) and e.reason == "run_missing":
                    outcomes.append(page_outcome(row["runId"], "raced"))
                else:
                    outcomes.append(page_outcome(row["runId"], "failed", error=e.to_json()))
                continue
            status = "raced" if result["status"] == "settled" else result["status"]
            outcomes.append(page_outcome(row["runId"], status, result))
        scanned, runs, attempts, blocked = accumulate_page(outcomes)
        next_cursor = None
        if len(rows) > limit:
            last = rows[limit - 1]
            next_cursor = {"cancelRequestedAtMs": last["cancelRequestedAtMs"], "runId": last["runId"]}
        try:
            has_more = queries.any_cancellation_candidate(self._conn)
        except sqlite3.Error as e:
            raise fail.map_storage_error(e) from e
        result = {"scanned": scanned, "settledRuns": runs, "settledAttempts": attempts, "blocked": blocked,
                  "hasMore": has_more, "next": next_cursor, "outcomes": outcomes}
        return check_page_result(limit, result)
