"""Candidate queries in SQL with keyset paging (commands.md §2.6, storage.md §8).

Each query reads limit + 1 rows strictly after the cursor in ascending key order; text compares
with the BINARY collation, i.e. by code point (D-9).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from qlwf.impl.commands.pages import frontier_candidate, page_result
from qlwf.impl.commands.store import ACTIVE_SQL
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors
from qlwf.model.records import Record

from .codec import ADMISSION_STEPS_TABLE, ADMISSIONS_TABLE, TASK_RECEIPTS_TABLE

__all__ = ["QUERIES", "any_cancellation_candidate", "page_result"]

Cursor = tuple[Any, ...] | None

_TERMINAL = ", ".join(f"'{s}'" for s in sorted(T.TERMINAL_STEP))
_BLOCKING = ", ".join(f"'{s}'" for s in sorted(T.BLOCKING_STEP))

# frontier.md §5: running without intent, and (A) a pending step whose direct needs all succeeded or
# include a blocking one, or (B) every StepRun terminal. Needs come from the admission step entries.
FRONTIER_SQL = f"""
SELECT a.run_id, a.plan_digest, a.admitted_at_ms
FROM "{ADMISSIONS_TABLE}" AS a JOIN "Runs" AS r ON r.id = a.run_id
WHERE r.status = 'running' AND r.cancel_requested_at_ms IS NULL {{keyset}}
  AND (
    EXISTS (
      SELECT 1 FROM "{ADMISSION_STEPS_TABLE}" AS st
      JOIN "StepRuns" AS s ON s.run_id = st.run_id AND s.id = st.step_run_id
      WHERE st.plan_digest = a.plan_digest AND s.status = 'pending'
        AND (NOT EXISTS (SELECT 1 FROM json_each(st.needs_json) AS n
                         LEFT JOIN "StepRuns" AS d ON d.run_id = st.run_id AND d.step_key = n.value
                         WHERE d.status IS NOT 'succeeded')
             OR EXISTS (SELECT 1 FROM json_each(st.needs_json) AS n
                        JOIN "StepRuns" AS d ON d.run_id = st.run_id AND d.step_key = n.value
                        WHERE d.status IN ({_BLOCKING}))))
    OR NOT EXISTS (SELECT 1 FROM "StepRuns" AS s WHERE s.run_id = a.run_id AND s.status NOT IN ({_TERMINAL})))
ORDER BY a.admitted_at_ms, a.plan_digest
LIMIT ?
"""

# task-attempts.md §2.
TASK_SQL = f"""
SELECT s.run_id, s.id, s.ready_at_ms, a.plan_digest
FROM "StepRuns" AS s JOIN "Runs" AS r ON r.id = s.run_id
LEFT JOIN "{ADMISSIONS_TABLE}" AS a ON a.run_id = s.run_id
WHERE r.status = 'running' AND r.cancel_requested_at_ms IS NULL AND s.kind = 'task' AND s.status = 'ready'
  AND s.ready_at_ms IS NOT NULL AND s.attempt_count < {T.MAX_STEP_RUN_ATTEMPTS}
  AND NOT EXISTS (SELECT 1 FROM "{TASK_RECEIPTS_TABLE}" AS t
                  WHERE t.run_id = s.run_id AND t.step_run_id = s.id AND t.step_run_version = s.version)
  {{keyset}}
ORDER BY s.ready_at_ms, s.id
LIMIT ?
"""

# task-attempts.md §9: active attempts whose lease is leased and expired at `now`.
RECOVERY_SQL = f"""
SELECT a.id, a.run_id, a.step_run_id, a.status, l.expires_at_ms
FROM "RunAttempts" AS a JOIN "RunDispatchLeases" AS l ON l.attempt_id = a.id
WHERE a.status IN {ACTIVE_SQL} AND l.status = 'leased' AND l.expires_at_ms <= ? {{keyset}}
ORDER BY l.expires_at_ms, a.id
LIMIT ?
"""

# cancellation.md §8.
CANCELLATION_SQL = """
SELECT id, cancel_requested_at_ms FROM "Runs"
WHERE trigger_type = 'plugin_package_workflow' AND execution_owner = 'runtime' AND status = 'running'
  AND cancel_requested_at_ms IS NOT NULL {keyset}
ORDER BY cancel_requested_at_ms, id
LIMIT ?
"""

_KEYSETS = {
    "frontier_candidates": "(a.admitted_at_ms, a.plan_digest)",
    "task_candidates": "(s.ready_at_ms, s.id)",
    "recovery_candidates": "(l.expires_at_ms, a.id)",
    "cancellation_candidates": "(cancel_requested_at_ms, id)",
}


def _rows(conn: sqlite3.Connection, query: str, sql: str, after: Cursor, limit: int,
          leading: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    keyset = "" if after is None else f"AND {_KEYSETS[query]} > (?, ?)"
    params = (*leading, *(after or ()), limit + 1)
    return conn.execute(sql.format(keyset=keyset), params).fetchall()


def frontier_rows(conn: sqlite3.Connection, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [frontier_candidate(run_id, pd, at, fail)
            for run_id, pd, at in _rows(conn, "frontier_candidates", FRONTIER_SQL, after, limit)]


def task_rows(conn: sqlite3.Connection, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [{"runId": run_id, "stepRunId": sid, "readyAtMs": at, "planDigest": pd}
            for run_id, sid, at, pd in _rows(conn, "task_candidates", TASK_SQL, after, limit)]


def recovery_rows(conn: sqlite3.Connection, after: Cursor, limit: int, fail: CommandErrors, now: int) -> list[Record]:
    return [{"attemptId": aid, "runId": run_id, "stepRunId": sid, "status": status, "leaseExpiresAtMs": exp}
            for aid, run_id, sid, status, exp in _rows(conn, "recovery_candidates", RECOVERY_SQL, after, limit,
                                                       (now,))]


def cancellation_rows(conn: sqlite3.Connection, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [{"runId": run_id, "cancelRequestedAtMs": at}
            for run_id, at in _rows(conn, "cancellation_candidates", CANCELLATION_SQL, after, limit)]


def any_cancellation_candidate(conn: sqlite3.Connection) -> bool:
    return bool(_rows(conn, "cancellation_candidates", CANCELLATION_SQL, None, 0))


QUERIES: dict[str, Callable[..., list[Record]]] = {
    "frontier_candidates": frontier_rows,
    "task_candidates": task_rows,
    "recovery_candidates": recovery_rows,
    "cancellation_candidates": cancellation_rows,
}
