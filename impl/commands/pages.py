"""Keyset pages and the convergence page, dialect-neutral (commands.md §2.6, §4.18; cancellation.md §8)."""

from __future__ import annotations

from typing import Any

from qlwf.model import tables as T
from qlwf.model.cancellation import accumulate_page, check_page_result, page_outcome
from qlwf.model.errors import CommandErrors, QlwfError
from qlwf.model.records import Record
from qlwf.model.values import is_digest, is_portable_id, is_timestamp

# PostgreSQL only: a failed try-lock, or every try hit a lock, deadlock or serialization failure.
LOCKED_ERRORS = frozenset({("Conflict", "authority_locked"), ("Unavailable", "retry_exhausted")})


def page_result(query: str, rows: list[Record], limit: int) -> Record:
    """commands.md §2.6 result: candidates, truncated, next (only when truncated)."""
    page = rows[:limit]
    result: Record = {"candidates": page, "truncated": len(rows) > limit}
    if len(rows) > limit:
        _, cursor_keys = T.QUERY_PAGES[query]
        result["next"] = {k: page[-1][k] for k, _ in cursor_keys}
    return result


def frontier_candidate(run_id: Any, plan_digest: Any, admitted_at: Any, fail: CommandErrors) -> Record:
    """storage.md §8: a malformed runId, planDigest or admittedAtMs in a returned row is stored drift."""
    if not (is_portable_id(run_id) and is_digest(plan_digest) and is_timestamp(admitted_at)):
        raise fail.unavailable("candidate_drift", f"frontier candidate row is malformed: {run_id!r}")
    return {"runId": run_id, "planDigest": plan_digest, "admittedAtMs": admitted_at}


def workflow_outcome(run_id: str, result: Record | None = None, error: QlwfError | None = None) -> Record:
    """The page outcome of one workflow's converge_cancellation (cancellation.md §8)."""
    if error is not None:
        if error.error_class == "Conflict" and error.reason == "run_missing":
            return page_outcome(run_id, "raced")
        if (error.error_class, error.reason) in LOCKED_ERRORS:
            return page_outcome(run_id, "locked")
        return page_outcome(run_id, "failed", error=error.to_json())
    assert result is not None
    return page_outcome(run_id, "raced" if result["status"] == "settled" else result["status"], result)


def assemble_page(limit: int, rows: list[Record], outcomes: list[Record], has_more: bool) -> Record:
    """commands.md §4.18 steps 4–6: counters, cursor of the last processed candidate, bounds check."""
    scanned, runs, attempts, blocked = accumulate_page(outcomes)
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = {"cancelRequestedAtMs": last["cancelRequestedAtMs"], "runId": last["runId"]}
    result = {"scanned": scanned, "settledRuns": runs, "settledAttempts": attempts, "blocked": blocked,
              "hasMore": has_more, "next": next_cursor, "outcomes": outcomes}
    return check_page_result(limit, result)
