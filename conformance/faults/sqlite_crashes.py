"""Crashes at every statement boundary of every writing command (SQLite, a file database in WAL).

For each writing command and each SQL statement k it runs inside its transaction, the command is
started and, just before statement k:

1. the database files (main file and WAL) are copied as a killed process would leave them, and a
   fresh adapter opened on the copy must read back exactly the state before the command (SQLite's
   recovery discards the uncommitted transaction);
2. statement k raises instead of running; the command must fail and leave the live store exactly as
   before (ROLLBACK on every error path, storage.md §6.1).

k grows until the command completes without reaching the crash point: that run is the real one,
and the lockstep harness compares it with the model as usual. A trace passes only if every crash
point is atomic and the uninterrupted run conforms.

converge_cancellation_page runs uninterrupted here: a statement that raises inside one of its
workflow transactions is, by design, that workflow's `failed` outcome and the page answers, so
the abort cannot be told from a swallowed crash. Its per-workflow transaction is the
converge_cancellation command, covered on its own; the PostgreSQL harness (pg_crashes.py) also
crashes the page itself.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qlwf.conformance.backends.registry import CrashEvidence
from qlwf.conformance.lockstep.compare import LockstepResult, run_lockstep
from qlwf.conformance.traces.format import Trace
from qlwf.impl.port import Record, Snapshot
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.store import SqliteStore
from qlwf.model import tables as T


class InjectedCrash(sqlite3.OperationalError):
    """Raised instead of running the planned statement."""


class CrashAtomicityError(AssertionError):
    """A crash point left a partial write behind (the lockstep harness reports it as a divergence)."""


@dataclass
class CrashPlan:
    at: int | None = None  # crash before this statement of the current command (1-based)
    seen: int = 0
    fired: bool = False
    on_crash: Callable[[], None] | None = None

    def arm(self, at: int | None, on_crash: Callable[[], None] | None = None) -> None:
        self.at, self.seen, self.fired, self.on_crash = at, 0, False, on_crash


class CrashingConnection:
    """A connection proxy for the store: counts its statements and crashes at the planned one."""

    def __init__(self, conn: sqlite3.Connection, plan: CrashPlan) -> None:
        self._conn = conn
        self._plan = plan

    def _boundary(self) -> None:
        plan = self._plan
        plan.seen += 1
        if plan.at is not None and plan.seen == plan.at:
            plan.fired = True
            if plan.on_crash is not None:
                plan.on_crash()
            raise InjectedCrash(f"injected crash before statement {plan.at}")

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self._boundary()
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        self._boundary()
        return self._conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@dataclass
class CrashStats:
    commands: int = 0
    crash_points: int = 0
    problems: list[str] = field(default_factory=list)
    by_command: Counter[str] = field(default_factory=Counter)  # crash points per command name


class CrashingSqliteAdapter(SqliteAdapter):
    """The SQLite adapter on a file database whose store statements crash on plan."""

    def __init__(self, directory: Path, stats: CrashStats, store_class: type[SqliteStore] = SqliteStore) -> None:
        self.directory = directory
        self.path = directory / "store.db"
        self.plan = CrashPlan()
        self.crash_stats = stats
        plan = self.plan
        super().__init__(self.path, store_factory=lambda conn: store_class(CrashingConnection(conn, plan)))

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        if name not in T.WRITING_COMMANDS or name == "converge_cancellation_page":
            self.plan.arm(None)
            return super().execute(name, args, now)
        self.crash_stats.commands += 1
        before = self.snapshot()
        k = 1
        while True:
            recovered: list[Snapshot] = []

            def keep_killed_copy(into: list[Snapshot] = recovered) -> None:  # bound now: this crash point's list
                into.append(self._killed_copy())

            self.plan.arm(k, keep_killed_copy)
            try:
                result = super().execute(name, args, now)
            except Exception:
                if not self.plan.fired:
                    raise  # the command's own outcome, reached before statement k: the real run
                self._check(name, k, before, recovered)
                k += 1
                continue
            if self.plan.fired:
                raise CrashAtomicityError(f"{name}: a crash before statement {k} was swallowed and the command "
                                          "still answered")
            return result

    def _check(self, name: str, k: int, before: Snapshot, recovered: list[Snapshot]) -> None:
        self.crash_stats.crash_points += 1
        self.crash_stats.by_command[name] += 1
        if not recovered or recovered[0] != before:
            raise CrashAtomicityError(f"{name}: killed before statement {k}, recovery reads a partial write")
        if self.snapshot() != before:
            raise CrashAtomicityError(f"{name}: aborted before statement {k}, the rollback left a partial write")

    def _killed_copy(self) -> Snapshot:
        """The files as a killed process leaves them, read back through a fresh open (recovery)."""
        crash_dir = Path(tempfile.mkdtemp(dir=self.directory))
        try:
            for suffix in ("", "-wal"):
                src = Path(f"{self.path}{suffix}")
                if src.exists():
                    shutil.copyfile(src, crash_dir / f"store.db{suffix}")
            recovered = SqliteAdapter(crash_dir / "store.db")
            try:
                return recovered.snapshot()
            finally:
                recovered.close()
        finally:
            shutil.rmtree(crash_dir, ignore_errors=True)


@contextmanager
def crashing_sqlite(stats: CrashStats,
                    store_class: type[SqliteStore] = SqliteStore) -> Iterator[CrashingSqliteAdapter]:
    directory = Path(tempfile.mkdtemp(prefix="qlwf-crash-"))
    adapter = CrashingSqliteAdapter(directory, stats, store_class)
    try:
        yield adapter
    finally:
        adapter.close()
        shutil.rmtree(directory, ignore_errors=True)


def run_with_crashes(trace: Trace, stats: CrashStats, store_class: type[SqliteStore] = SqliteStore) -> LockstepResult:
    """Lockstep `trace` against SQLite with a kill and an abort before every statement of every command."""
    with crashing_sqlite(stats, store_class) as adapter:
        return run_lockstep(trace, adapter)


def gate_crashes(quick: bool, traces: list[Trace] | None = None) -> CrashEvidence:
    """The sqlite backend's crash harness (BackendSpec.crashes): a kill and an abort before every
    statement of every writing command of `traces` (default: the first corpus traces)."""
    from qlwf.conformance.lockstep.runner import corpus_traces

    stats = CrashStats()
    crashed = traces if traces is not None else corpus_traces()[: 2 if quick else 5]
    problems = []
    for trace in crashed:
        result = run_with_crashes(trace, stats)
        if not result.passed:
            problems.append(f"crash injection on {trace.name}\n" + (result.divergence.render()
                                                                     if result.divergence else ""))
    counts = {"crash_traces": len(crashed), "crash_commands": stats.commands, "crash_points": stats.crash_points}
    return CrashEvidence(f"{stats.crash_points} crash points in {stats.commands} commands atomic (kill + abort)",
                         counts, tuple(problems))
