"""Crashes at every statement boundary of every writing command, and server crashes, on PostgreSQL.

The mirror of crashes.py (SQLite). Statement k of a writing command is the k-th statement its
connection sends inside the command: BEGIN, its SET LOCALs, every store statement, COMMIT (not the
ROLLBACK of a command that failed on its own). The backend sends its statements in batches, one
round trip each (impl/postgres/session.py, docs/decisions.md Q-62); every statement is still a
crash point. Before statement k the statements of its batch that precede it are sent as a round
trip of their own (so the server has run exactly statements 1..k-1), then the crash is injected,
then the rest of the batch goes out. A crash point that is the first statement of a batch is a
round-trip boundary of the unmodified backend (`round_trip_points`); one inside a batch stands for
the backend dying while it works through a pipeline.

For each writing command of a trace and each k, the command is started and, just before
statement k:

* `kill` mode: a second connection terminates the command's backend (`pg_terminate_backend`, waiting
  until it is gone), then statement k goes out on the dead connection. The command must fail with
  Unavailable, and the durable state (read on a fresh connection) must be exactly the state before
  the command. k grows until the command completes without reaching the crash point: that run is
  the real one, compared with the model by the lockstep harness as usual, so re-running a killed
  command gives the model's outcome.
* `server` mode: the server is crashed (`pg_ctl stop -m immediate`) before the planned statements
  (inside the transaction: before COMMIT, every write sent) and right after every planned command
  was acknowledged (between commands), then restarted; crash recovery must keep every acknowledged
  commit (the lockstep harness compares the durable snapshot with the model after every step) and
  nothing of the interrupted transaction (the state equals the state before the command), and the
  trace runs on to its verdict.

converge_cancellation_page commits one workflow at a time by design (storage.md §6.1), and a
workflow's failure is an outcome of the page, not an error. Its crash points are those of its scan
and of its first workflow's transaction; there the whole caller dies (the page stops), and the
state must still be the state before the page. Later workflows run the converge_cancellation
transaction, whose every statement is covered as a command of its own.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from qlwf.conformance.backends.postgres import shared_server
from qlwf.conformance.backends.registry import CrashEvidence
from qlwf.conformance.faults.outage import quiet_pool
from qlwf.conformance.faults.sqlite_crashes import CrashAtomicityError
from qlwf.conformance.lockstep.compare import LockstepResult, load_invariant_check, run_lockstep
from qlwf.conformance.provision.cluster import ThrowawayCluster
from qlwf.conformance.provision.databases import temporary_database
from qlwf.conformance.provision.servers import PgServer
from qlwf.conformance.traces.format import Trace
from qlwf.impl.port import FixedClock, Record, Snapshot
from qlwf.impl.postgres.adapter import PostgresAdapter
from qlwf.impl.postgres.database import PgDatabase
from qlwf.impl.postgres.session import Boundaries
from qlwf.model import tables as T
from qlwf.model.errors import Unavailable

PAGE = "converge_cancellation_page"
KILL_TIMEOUT_S = 5.0


class InjectedCrash(Exception):
    """The caller died inside a convergence page (raised after the backend was killed)."""


@dataclass
class StatementPlan:
    """Where the current command crashes (impl/postgres/session.py `Boundaries`)."""

    at: int | None = None  # crash before this statement of the current command (1-based)
    seen: int = 0
    fired: bool = False
    first_of_round_trip: bool = False  # the statement it fired before opened a round trip
    committed: bool = False  # the page: a COMMIT went through (its first workflow is durable)
    action: Callable[[psycopg.Connection[Any]], None] | None = None
    raise_after: bool = False  # the page: the caller dies too
    at_commit: bool = False  # crash before the first COMMIT instead of statement `at`

    def arm(self, at: int | None, action: Callable[[psycopg.Connection[Any]], None] | None = None,
            raise_after: bool = False, at_commit: bool = False) -> None:
        self.at, self.seen, self.fired, self.committed = at, 0, False, False
        self.first_of_round_trip = False
        self.action, self.raise_after, self.at_commit = action, raise_after, at_commit

    def interrupt_before(self, sql: str, first: bool) -> bool:
        # A ROLLBACK is the error path of a command that already failed on its own: not a crash point.
        if self.at is None or self.fired or self.committed or sql == "ROLLBACK":
            return False
        self.seen += 1
        hit = (sql == "COMMIT") if self.at_commit else self.seen == self.at
        if hit:
            self.first_of_round_trip = first
        return hit

    def interrupt(self, conn: psycopg.Connection[Any]) -> None:
        self.fired = True
        if self.action is not None:
            self.action(conn)
        if self.raise_after:
            # let the driver notice the dead connection, so that the pool discards it
            with contextlib.suppress(psycopg.Error):
                conn.execute("SELECT 1")
            raise InjectedCrash(f"the caller died before statement {self.seen}")

    def sent(self, statements: Sequence[str]) -> None:
        if self.raise_after and "COMMIT" in statements:  # the page: one workflow is durable now
            self.committed = True


@dataclass
class PgCrashStats:
    commands: int = 0
    crash_points: int = 0  # statement boundaries injected (kills or server crashes inside a transaction)
    round_trip_points: int = 0  # of them, at the first statement of one of the backend's round trips
    server_crashes: int = 0  # every pg_ctl stop -m immediate, inside transactions and between commands
    by_command: Counter[str] = field(default_factory=Counter)  # crash points per command name
    round_trips_by_command: Counter[str] = field(default_factory=Counter)  # round-trip boundaries per command


class CrashingPgAdapter(PostgresAdapter):
    """The PostgreSQL adapter whose writing commands crash on plan (see the module docstring)."""

    def __init__(self, database: PgDatabase, admin_dsn: str, stats: PgCrashStats, *,
                 cluster: ThrowawayCluster | None = None, crash_every: int = 0) -> None:
        super().__init__(database, FixedClock())
        self.plan = StatementPlan()
        self.crash_stats = stats
        self.cluster = cluster  # server mode when set
        self.crash_every = crash_every  # server mode: crash around every n-th writing command
        self._admin = psycopg.connect(admin_dsn, autocommit=True)
        self._writing = 0

    def close(self) -> None:
        super().close()
        self._admin.close()

    def _boundaries(self) -> Boundaries | None:
        return self.plan if self.plan.at is not None else None

    def execute(self, name: str, args: Any, now: int | None = None) -> Record:
        if name not in T.WRITING_COMMANDS:
            self.plan.arm(None)
            return super().execute(name, args, now)
        self.crash_stats.commands += 1
        self._writing += 1
        if self.cluster is not None:
            return self._with_server_crashes(name, args, now)
        before = self.snapshot()
        k = 1
        while True:
            self.plan.arm(k, self._kill_backend, raise_after=name == PAGE)
            try:
                result = super().execute(name, args, now)
            except Exception as e:
                if not self.plan.fired:
                    raise  # the command's own outcome, reached before statement k: the real run
                self._check(name, k, before, e)
                k += 1
                continue
            finally:
                self.plan.arm(None)
            if self.plan.fired:
                raise CrashAtomicityError(f"{name}: the backend was killed before statement {k} and the command "
                                          "still answered")
            return result

    def _kill_backend(self, conn: psycopg.Connection[Any]) -> None:
        """Terminate the backend and wait until it is gone (its transaction aborted), polling every
        millisecond: pg_terminate_backend's own wait sleeps in 100 ms steps."""
        pid = conn.info.backend_pid
        row = self._admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        if not (row and row[0]):
            raise RuntimeError(f"backend {pid} could not be signalled")
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while self._admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            if time.monotonic() > deadline:
                raise RuntimeError(f"backend {pid} still alive {KILL_TIMEOUT_S} s after pg_terminate_backend")
            time.sleep(0.001)

    def _check(self, name: str, k: int, before: Snapshot, error: Exception) -> None:
        self.crash_stats.crash_points += 1
        self.crash_stats.round_trip_points += self.plan.first_of_round_trip
        self.crash_stats.round_trips_by_command[name] += self.plan.first_of_round_trip
        self.crash_stats.by_command[name] += 1
        if not isinstance(error, Unavailable | InjectedCrash):
            raise CrashAtomicityError(f"{name}: a crash before statement {k} was reported as "
                                      f"{type(error).__name__}: {error} (expected Unavailable)")
        after = self.snapshot()
        if after != before:
            raise CrashAtomicityError(f"{name}: crashed before statement {k}, the durable state holds a partial write")

    # ---- server mode -------------------------------------------------------------------------------
    def _crash_server(self, _conn: Any = None) -> None:
        assert self.cluster is not None
        self.cluster.crash()
        self.crash_stats.server_crashes += 1
        self.cluster.restart()
        self._admin.close()
        self._admin = psycopg.connect(self.cluster.dsn(), autocommit=True)
        self.database.pool.check()  # drop the idle connections the crash broke

    def _with_server_crashes(self, name: str, args: Any, now: int | None) -> Record:
        if self.crash_every <= 0 or self._writing % self.crash_every:
            return super().execute(name, args, now)
        before = self.snapshot()
        # inside the transaction: every write done, COMMIT not yet sent (for the page: its first
        # workflow's COMMIT, before which nothing of the page is durable)
        self.plan.arm(0, self._crash_server, raise_after=name == PAGE, at_commit=True)
        try:
            result = super().execute(name, args, now)
        except Exception as e:
            if not self.plan.fired:
                raise  # failed before any COMMIT: the command's own outcome
            self._check(name, self.plan.seen, before, e)
            result = super().execute(name, args, now)  # the real run
        finally:
            self.plan.arm(None)
        self._crash_server()  # between commands: after the answer, before the harness reads back
        return result


@contextlib.contextmanager
def crashing_postgres(stats: PgCrashStats, server: PgServer, *, cluster: ThrowawayCluster | None = None,
                      crash_every: int = 0) -> Iterator[CrashingPgAdapter]:
    """A crashing adapter on a fresh database of `server` (of `cluster`, which it crashes, in server mode)."""
    with quiet_pool(), temporary_database(server, "qlwf_crash") as dsn:
        database = PgDatabase(dsn, size=2)
        try:
            database.apply_schema()
            adapter = CrashingPgAdapter(database, dsn, stats, cluster=cluster, crash_every=crash_every)
            try:
                yield adapter
            finally:
                adapter.close()
        finally:
            database.close()


def run_with_kills(traces: Iterable[Trace], stats: PgCrashStats, server: PgServer | None = None, *,
                   invariants: bool = False) -> list[LockstepResult]:
    """Lockstep every trace with a backend kill before every statement of every writing command;
    one database, emptied before each trace."""
    server = server if server is not None else shared_server()[0]
    check = load_invariant_check() if invariants else None
    results = []
    with crashing_postgres(stats, server) as adapter:
        for trace in traces:
            adapter.database.reset()
            results.append(run_lockstep(trace, adapter, invariants=check, invariants_every_step=False))
    return results


def run_with_server_crashes(trace: Trace, stats: PgCrashStats, cluster: ThrowawayCluster,
                            every: int = 3) -> LockstepResult:
    """Lockstep `trace` on `cluster` (durability on) crashing the server inside and after every
    `every`-th writing command; every invariant is evaluated on the recovered state after every step."""
    if not cluster.durable:
        raise ValueError("server crashes need a cluster started with durable=True: with synchronous_commit off "
                         "an acknowledged commit may be lost, which is no bug of the backend")
    with crashing_postgres(stats, cluster, cluster=cluster, crash_every=every) as adapter:
        return run_lockstep(trace, adapter, invariants=load_invariant_check())


# Quick kill budget: two short corpus traces that still run admission, task admission, claim,
# release, cancellation, convergence and the convergence page (the full gate kills the whole corpus).
QUICK_KILL_TRACES = ("adr0228-attempt-two-steps-parent-atomic", "adr0228-page-isolates-drifted-workflow")
SERVER_CRASH_TRACES = ("adr0228-partial-completion-final", "adr0226-failure-skips-chain")


def gate_crashes(quick: bool, traces: list[Trace] | None = None) -> CrashEvidence:
    """The postgres backend's crash harness (BackendSpec.crashes): a backend killed before every
    statement, and server crashes on a durable throwaway cluster. Given `traces`, only the kills,
    on those traces (the backend-parametrised tests; the gate crashes servers too)."""
    from qlwf.conformance.lockstep.runner import corpus_traces
    from qlwf.conformance.provision.binaries import find_pg_bin

    def rendered(what: str, result: LockstepResult) -> str:
        return f"{what}\n" + (result.divergence.render() if result.divergence else result.trace)

    corpus = corpus_traces()
    kills, crashes = PgCrashStats(), PgCrashStats()
    problems: list[str] = []
    gaps: list[str] = []
    chosen = traces if traces is not None else [t for t in corpus if t.name in QUICK_KILL_TRACES] if quick else corpus
    problems += [rendered(f"backend kill on {r.trace}", r) for r in run_with_kills(chosen, kills) if not r.passed]
    if traces is not None:
        gaps.append("server crashes not run: only the given traces' backend kills were asked for")
    elif find_pg_bin() is None:  # an external server (QLWF_PG_DSN) is not ours to crash
        gaps.append("server crashes not run: no local PostgreSQL binaries to start a durable cluster")
    else:
        with ThrowawayCluster(durable=True) as cluster:
            for trace in [t for t in corpus if t.name in SERVER_CRASH_TRACES[: 1 if quick else 2]]:
                result = run_with_server_crashes(trace, crashes, cluster, every=4 if quick else 2)
                if not result.passed:
                    problems.append(rendered(f"server crash on {trace.name}", result))
    counts = {"kill_commands": kills.commands, "kill_points": kills.crash_points,
              "kill_round_trips": kills.round_trip_points, "server_crashes": crashes.server_crashes}
    summary = (f"{kills.crash_points} backend kills ({kills.round_trip_points} of them at round-trip boundaries) in "
               f"{kills.commands} commands atomic; {crashes.server_crashes} "
               "server crashes (stop -m immediate, fsync on) kept every acknowledged commit and no uncommitted write")
    return CrashEvidence(summary, counts, tuple(problems), tuple(gaps))
