"""Storage mutants of the convergence page loop (the adapters' `_converge_page`), applied by monkeypatching.

Both reintroduce known defects of the production runtime (cancellation.md §8, D-6):

* `page_in_one_transaction` converges the whole page in one transaction: a drifted workflow's error
  rolls back its healthy page mates and fails the page — on every later sweep too;
* `page_ignores_cursor` scans every page from the head of the order: a blocked cancelling Run at the
  head fills each page, so the Runs after it (newer cancellations) are never reached.

Each must be caught by conformance on generated traces alone (tests/test_generators_pages.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from qlwf.impl.commands.failures import Failures
from qlwf.impl.commands.pages import assemble_page, workflow_outcome
from qlwf.impl.commands.registry import CONVERGE, run_command
from qlwf.impl.port import Record


@dataclass(frozen=True)
class StorageMutant:
    name: str
    breaks: str  # the spec rule the mutant violates
    layer: str  # "sqlite" or "postgres"
    check: str  # the behavioural check that must catch it
    apply: Callable[[pytest.MonkeyPatch], None]


def _one_transaction_sqlite(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.sqlite import queries
    from qlwf.impl.sqlite.adapter import SqliteAdapter

    def page(self: SqliteAdapter, fail: Failures, limit: int, after: tuple[Any, ...] | None) -> Record:
        rows = queries.cancellation_rows(self._conn, after, limit, fail)
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            outcomes = [workflow_outcome(row["runId"], run_command(self._store, Failures("converge_cancellation"),
                                                                   self.clock, CONVERGE, {"runId": row["runId"]}))
                        for row in rows[:limit]]
            self._conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return assemble_page(limit, rows, outcomes, queries.any_cancellation_candidate(self._conn))

    mp.setattr(SqliteAdapter, "_converge_page", page)


def _one_transaction_postgres(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.postgres import queries
    from qlwf.impl.postgres.adapter import PostgresAdapter, _rollback

    def page(self: PostgresAdapter, fail: Failures, limit: int, after: tuple[Any, ...] | None) -> Record:
        with self._connection(fail) as conn:
            rows = queries.cancellation_rows(conn, after, limit, fail)
            conn.execute(self._begin)
            try:
                store = self._store_factory(conn)
                outcomes = [workflow_outcome(row["runId"], run_command(store, Failures("converge_cancellation"),
                                                                       self.clock, CONVERGE, {"runId": row["runId"]}))
                            for row in rows[:limit]]
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            return assemble_page(limit, rows, outcomes, queries.any_cancellation_candidate(conn))

    mp.setattr(PostgresAdapter, "_converge_page", page)


def _ignore_cursor(adapter: type[Any]) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(mp: pytest.MonkeyPatch) -> None:
        original = adapter._converge_page

        def page(self: Any, fail: Failures, limit: int, after: tuple[Any, ...] | None) -> Record:
            return original(self, fail, limit, None)  # every page starts at the head of the order

        mp.setattr(adapter, "_converge_page", page)

    return apply


def _ignore_cursor_sqlite(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.sqlite.adapter import SqliteAdapter

    _ignore_cursor(SqliteAdapter)(mp)


def _ignore_cursor_postgres(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.postgres.adapter import PostgresAdapter

    _ignore_cursor(PostgresAdapter)(mp)


ONE_TRANSACTION = "D-6 / cancellation.md §8 item 2: each workflow of a page converges in its own transaction"
NO_STARVATION = "cancellation.md §8 step 1 and 'No head-of-line starvation': pages resume strictly after the cursor"
CHECK = "conformance on generated traces (conform-sqlite / conform-postgres)"

PAGE_MUTANTS: tuple[StorageMutant, ...] = (
    StorageMutant("sqlite.page_in_one_transaction", ONE_TRANSACTION, "sqlite", CHECK, _one_transaction_sqlite),
    StorageMutant("sqlite.page_ignores_cursor", NO_STARVATION, "sqlite", CHECK, _ignore_cursor_sqlite),
    StorageMutant("postgres.page_in_one_transaction", ONE_TRANSACTION, "postgres", CHECK, _one_transaction_postgres),
    StorageMutant("postgres.page_ignores_cursor", NO_STARVATION, "postgres", CHECK, _ignore_cursor_postgres),
)
