"""Candidate queries in SQL with keyset paging (commands.md §2.6, storage.md §8), PostgreSQL dialect.

Each query is one statement reading limit + 1 rows strictly after the cursor in ascending key
order; every text ORDER BY and keyset comparison uses the C collation (code-point order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qlwf.impl.commands.pages import frontier_candidate
from qlwf.impl.commands.store import ACTIVE_SQL
from qlwf.model import tables as T
from qlwf.model.errors import CommandErrors
from qlwf.model.records import Record

from .codec import (
    ADMISSION_STEPS_TABLE,
    ADMISSIONS_TABLE,
    ATTEMPTS_TABLE,
    LEASES_TABLE,
    RUNS_TABLE,
    STEP_RUNS_TABLE,
    TASK_RECEIPTS_TABLE,
    bigint,
)
from .session import PgSession

Cursor = tuple[Any, ...] | None
Conn = PgSession

_TERMINAL = ", ".join(f"'{s}'" for s in sorted(T.TERMINAL_STEP))
_BLOCKING = ", ".join(f"'{s}'" for s in sorted(T.BLOCKING_STEP))

# frontier.md §5: running without intent, and (A) a pending step whose direct needs all succeeded or
# include a blocking one, or (B) every StepRun terminal. Needs come from the admission step entries.
FRONTIER_SQL = f"""
SELECT a.run_id, a.plan_digest, a.admitted_at_ms
FROM {ADMISSIONS_TABLE} AS a JOIN {RUNS_TABLE} AS r ON r.id = a.run_id
WHERE r.status = 'running' AND r.cancel_requested_at_ms IS NULL {{keyset}}
  AND (
    EXISTS (
      SELECT 1 FROM {ADMISSION_STEPS_TABLE} AS st
      JOIN {STEP_RUNS_TABLE} AS s ON s.run_id = st.run_id AND s.id = st.step_run_id
      WHERE st.plan_digest = a.plan_digest AND s.status = 'pending'
        AND (NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(st.needs_json) AS n(key)
                         LEFT JOIN {STEP_RUNS_TABLE} AS d ON d.run_id = st.run_id AND d.step_key = n.key COLLATE "C"
                         WHERE d.status IS DISTINCT FROM 'succeeded')
             OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(st.needs_json) AS n(key)
                        JOIN {STEP_RUNS_TABLE} AS d ON d.run_id = st.run_id AND d.step_key = n.key COLLATE "C"
                        WHERE d.status IN ({_BLOCKING}))))
    OR NOT EXISTS (SELECT 1 FROM {STEP_RUNS_TABLE} AS s WHERE s.run_id = a.run_id AND s.status NOT IN ({_TERMINAL})))
ORDER BY a.admitted_at_ms, a.plan_digest COLLATE "C"
LIMIT %s
"""

# task-attempts.md §2.
TASK_SQL = f"""
SELECT s.run_id, s.id, s.ready_at_ms, a.plan_digest
FROM {STEP_RUNS_TABLE} AS s JOIN {RUNS_TABLE} AS r ON r.id = s.run_id
LEFT JOIN {ADMISSIONS_TABLE} AS a ON a.run_id = s.run_id
WHERE r.status = 'running' AND r.cancel_requested_at_ms IS NULL AND s.kind = 'task' AND s.status = 'ready'
  AND s.ready_at_ms IS NOT NULL AND s.attempt_count < {T.MAX_STEP_RUN_ATTEMPTS}
  AND NOT EXISTS (SELECT 1 FROM {TASK_RECEIPTS_TABLE} AS t
                  WHERE t.run_id = s.run_id AND t.step_run_id = s.id AND t.step_run_version = s.version)
  {{keyset}}
ORDER BY s.ready_at_ms, s.id COLLATE "C"
LIMIT %s
"""

# task-attempts.md §9: active attempts whose lease is leased and expired at `now`.
RECOVERY_SQL = f"""
SELECT a.id, a.run_id, a.step_run_id, a.status, l.expires_at_ms
FROM {ATTEMPTS_TABLE} AS a JOIN {LEASES_TABLE} AS l ON l.attempt_id = a.id
WHERE a.status IN {ACTIVE_SQL} AND l.status = 'leased' AND l.expires_at_ms <= %s {{keyset}}
ORDER BY l.expires_at_ms, a.id COLLATE "C"
LIMIT %s
"""

# cancellation.md §8.
CANCELLATION_SQL = f"""
SELECT id, cancel_requested_at_ms FROM {RUNS_TABLE}
WHERE trigger_type = 'plugin_package_workflow' AND execution_owner = 'runtime' AND status = 'running'
  AND cancel_requested_at_ms IS NOT NULL {{keyset}}
ORDER BY cancel_requested_at_ms, id COLLATE "C"
LIMIT %s
"""

_KEYSETS = {
    "frontier_candidates": '(a.admitted_at_ms, a.plan_digest COLLATE "C")',
    "task_candidates": '(s.ready_at_ms, s.id COLLATE "C")',
    "recovery_candidates": '(l.expires_at_ms, a.id COLLATE "C")',
    "cancellation_candidates": '(cancel_requested_at_ms, id COLLATE "C")',
}


def _rows(conn: Conn, query: str, sql: str, after: Cursor, limit: int,
          leading: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    keyset = "" if after is None else f"AND {_KEYSETS[query]} > (%s, %s)"
    params = (*leading, *(after or ()), limit + 1)
    return conn.fetchall(sql.format(keyset=keyset), params)  # one round trip, a prepared statement (wire.py)


def frontier_rows(conn: Conn, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [frontier_candidate(run_id, pd, bigint(at), fail)
            for run_id, pd, at in _rows(conn, "frontier_candidates", FRONTIER_SQL, after, limit)]


def task_rows(conn: Conn, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [{"runId": run_id, "stepRunId": sid, "readyAtMs": bigint(at), "planDigest": pd}
            for run_id, sid, at, pd in _rows(conn, "task_candidates", TASK_SQL, after, limit)]


def recovery_rows(conn: Conn, after: Cursor, limit: int, fail: CommandErrors, now: int) -> list[Record]:
    return [{"attemptId": aid, "runId": run_id, "stepRunId": sid, "status": status, "leaseExpiresAtMs": bigint(exp)}
            for aid, run_id, sid, status, exp in _rows(conn, "recovery_candidates", RECOVERY_SQL, after, limit,
                                                       (now,))]


def cancellation_rows(conn: Conn, after: Cursor, limit: int, fail: CommandErrors) -> list[Record]:
    return [{"runId": run_id, "cancelRequestedAtMs": bigint(at)}
            for run_id, at in _rows(conn, "cancellation_candidates", CANCELLATION_SQL, after, limit)]


def any_cancellation_candidate(conn: Conn) -> bool:
    return bool(_rows(conn, "cancellation_candidates", CANCELLATION_SQL, None, 0))


QUERIES: dict[str, Callable[..., list[Record]]] = {
    "frontier_candidates": frontier_rows,
    "task_candidates": task_rows,
    "recovery_candidates": recovery_rows,
    "cancellation_candidates": cancellation_rows,
}
