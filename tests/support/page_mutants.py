"""Storage mutants of the convergence page loop (the adapters' `_converge_page`), applied by monkeypatching.

Both are patched onto the dialect's adapter class (over impl/sql_adapter.py's shared page loop) and
reintroduce known defects of the production runtime (cancellation.md §8, D-6):

* `page_in_one_transaction` converges the whole page in one transaction: a drifted workflow's error
  rolls back its healthy page mates and fails the page — on every later sweep too;
* `page_ignores_cursor` scans every page from the head of the order: a blocked cancelling Run at the
  head fills each page, so the Runs after it (newer cancellations) are never reached.

Each must be caught by conformance on generated traces alone (tests/conformance/generate/test_generators_pages.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from qlwf.impl.commands.pages import assemble_page, workflow_outcome
from qlwf.impl.commands.registry import CONVERGE, run_command
from qlwf.impl.port import Record
from qlwf.impl.sql_adapter import SqlAdapter
from qlwf.model.errors import CommandErrors


@dataclass(frozen=True)
class StorageMutant:
    name: str
    breaks: str  # the spec rule the mutant violates
    layer: str  # "sqlite" or "postgres"
    check: str  # the behavioural check that must catch it
    apply: Callable[[pytest.MonkeyPatch], None]


def _one_transaction(adapter: type[SqlAdapter]) -> Callable[[pytest.MonkeyPatch], None]:
    """Scan, then every workflow of the page through the dialect's own transaction template, once."""

    def apply(mp: pytest.MonkeyPatch) -> None:
        def page(self: SqlAdapter, fail: CommandErrors, limit: int, after: tuple[Any, ...] | None) -> Record:
            with self._connection(fail) as conn:
                rows = self.queries.cancellation_rows(conn, after, limit, fail)
                self._begin(conn)
                try:
                    store, workflow = self._store_for(conn), CommandErrors("converge_cancellation")
                    outcomes = []
                    for row in rows[:limit]:
                        result = run_command(store, workflow, self.clock, CONVERGE, {"runId": row["runId"]})
                        outcomes.append(workflow_outcome(row["runId"], result))
                    self._commit(conn)
                except BaseException:
                    self._rollback(conn)
                    raise
                return assemble_page(limit, rows, outcomes, self.queries.any_cancellation_candidate(conn))

        mp.setattr(adapter, "_converge_page", page)

    return apply


def _one_transaction_sqlite(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.sqlite.adapter import SqliteAdapter

    _one_transaction(SqliteAdapter)(mp)


def _one_transaction_postgres(mp: pytest.MonkeyPatch) -> None:
    from qlwf.impl.postgres.adapter import PostgresAdapter

    _one_transaction(PostgresAdapter)(mp)


def _ignore_cursor(adapter: type[SqlAdapter]) -> Callable[[pytest.MonkeyPatch], None]:
    def apply(mp: pytest.MonkeyPatch) -> None:
        original = adapter._converge_page

        def page(self: SqlAdapter, fail: CommandErrors, limit: int, after: tuple[Any, ...] | None) -> Record:
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
