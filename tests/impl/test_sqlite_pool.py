"""Reused in-memory stores (impl/sqlite/memory.py MemoryStorePool, decisions Q-63): a store that a
trace closed comes back to the next trace emptied, indistinguishable from a fresh clone, or not at
all. Lockstep results (verdicts, steps, invariant counts, every divergence report) must be the same
with and without reuse, on correct and on broken stores."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from qlwf.conformance import backends
from qlwf.conformance.lockstep import runner
from qlwf.conformance.lockstep.compare import LockstepResult, load_invariant_check, run_lockstep
from qlwf.conformance.traces.format import Trace
from qlwf.impl.sqlite.adapter import SqliteAdapter
from qlwf.impl.sqlite.memory import MemoryStorePool, open_memory_database
from qlwf.impl.sqlite.store import SqliteStore

INVARIANTS = load_invariant_check()
SEED = 20261129


def _outcome(result: LockstepResult) -> dict[str, Any]:
    return {"trace": result.trace, "steps": result.steps, "checks": result.invariant_checks,
            "evaluations": result.invariant_evaluations,
            "divergence": None if result.divergence is None else result.divergence.to_json()}


def _run_all(traces: list[Trace], open_port: Callable[[], SqliteAdapter]) -> list[dict[str, Any]]:
    out = []
    for trace in traces:
        port = open_port()
        try:
            out.append(_outcome(run_lockstep(trace, port, invariants=INVARIANTS)))
        finally:
            port.close()
    return out


def _dump(conn: sqlite3.Connection) -> list[str]:
    return list(conn.iterdump())


def test_a_reused_store_is_a_fresh_clone_in_schema_rows_and_settings() -> None:
    pool = MemoryStorePool()
    fresh = open_memory_database()
    try:
        port = SqliteAdapter(pool=pool)
        conn = port._conn
        assert run_lockstep(runner.corpus_traces()[0], port, invariants=INVARIANTS).passed
        assert any(port.snapshot().values())  # the trace left rows behind
        port.close()
        again = SqliteAdapter(pool=pool)
        assert again._conn is conn  # reused, not cloned
        assert not any(again.snapshot().values())
        assert _dump(conn) == _dump(fresh)  # the same schema, and no row anywhere
        again.close()
    finally:
        fresh.close()
        pool.close()


def test_lockstep_results_are_the_same_with_and_without_reuse() -> None:
    traces = [*runner.corpus_traces(), *runner.generated_traces(8, SEED)]
    pool = MemoryStorePool()
    try:
        reused = _run_all(traces, lambda: SqliteAdapter(pool=pool))
    finally:
        pool.close()
    assert reused == _run_all(traces, SqliteAdapter)
    assert all(r["divergence"] is None for r in reused)


class LedgerSkippingStore(SqliteStore):
    """Broken: forgets the ledger entries of frontier mutations (a divergence in many traces)."""

    def insert_mutation(self, entry: dict[str, Any]) -> None:
        if not entry["mutationId"].startswith("workflow-frontier:"):
            super().insert_mutation(entry)


def test_a_broken_store_gets_the_same_divergence_reports_with_and_without_reuse() -> None:
    traces = [*runner.corpus_traces(), *runner.generated_traces(4, SEED)]
    pool = MemoryStorePool()
    try:
        reused = _run_all(traces, lambda: SqliteAdapter(store_factory=LedgerSkippingStore, pool=pool))
    finally:
        pool.close()
    assert reused == _run_all(traces, lambda: SqliteAdapter(store_factory=LedgerSkippingStore))
    assert sum(r["divergence"] is not None for r in reused) >= 3  # a diverging trace's store is reused too


@pytest.mark.parametrize("change", [
    "PRAGMA recursive_triggers = ON", "PRAGMA ignore_check_constraints = ON", "PRAGMA query_only = ON",
    "DROP INDEX ql3_step_runs_run_status_idx", "CREATE TEMP TABLE scratch (x)", "BEGIN IMMEDIATE",
])
def test_a_store_that_differs_from_a_fresh_clone_is_closed_not_reused(change: str) -> None:
    pool = MemoryStorePool()
    try:
        conn = pool.acquire()
        conn.execute(change)
        pool.release(conn)
        replacement = pool.acquire()
        assert replacement is not conn
        with pytest.raises(sqlite3.ProgrammingError):  # closed
            conn.execute("SELECT 1")
        replacement.close()
    finally:
        pool.close()


def test_a_store_whose_connection_was_handed_out_is_never_reused() -> None:
    pool = MemoryStorePool()
    try:
        port = SqliteAdapter(pool=pool)
        conn = port.connection  # its user could register functions no check can read back
        port.close()
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
        plain = SqliteAdapter(pool=pool)
        kept = plain._conn
        plain.close()
        again = pool.acquire()
        again.close()  # taken out of the pool: no longer the pool's to close
        assert again is kept  # the plain one was kept
    finally:
        pool.close()


def test_the_pool_keeps_at_most_its_limit_and_closes_everything_at_the_end() -> None:
    pool = MemoryStorePool(idle_limit=1)
    first, second = pool.acquire(), pool.acquire()
    pool.release(first)
    pool.release(second)  # beyond the limit: closed
    with pytest.raises(sqlite3.ProgrammingError):
        second.execute("SELECT 1")
    pool.close()
    with pytest.raises(sqlite3.ProgrammingError):
        first.execute("SELECT 1")
    third = pool.acquire()
    pool.release(third)  # after close: closed, not kept
    with pytest.raises(sqlite3.ProgrammingError):
        third.execute("SELECT 1")


def test_only_an_in_memory_store_comes_from_a_pool(tmp_path: Any) -> None:
    with pytest.raises(ValueError):
        SqliteAdapter(tmp_path / "x.db", pool=MemoryStorePool())


def test_the_conformance_backend_reuses_its_stores_and_releases_them_at_shutdown() -> None:
    factory = backends.get("sqlite").create()
    first = factory.open()
    assert isinstance(first, SqliteAdapter)
    conn = first._conn
    first.close()
    second = factory.open()
    assert isinstance(second, SqliteAdapter) and second._conn is conn
    second.close()
    factory.shutdown()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
    plain = backends.SqliteBackend(reuse=False)
    port = plain.open()
    assert isinstance(port, SqliteAdapter) and port._pool is None
    port.close()
